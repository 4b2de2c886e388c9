"""Everything that takes input from outside: the wire format, file import, Kafka ingestion, dead letters."""
