"""Everything that reads the log and materializes views: DuckDB projections, point-in-time queries, replay."""
