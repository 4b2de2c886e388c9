"""The application layer: the use cases every entry point calls (use_cases/, one feature service per module,
composed by application.py's `Application`), and what they are made of: the ontology service that runs commands
into the log (ontology_service.py), ingestion of wire envelopes (wire.py, ingestion.py), consolidation, recall by
tier, entity merges, disuse and forgetting.

Pure like the rest of domain/: it reaches storage, the read model and the engines only through domain/ports.py.
infra/bootstrap.py builds it; api/ (HTTP, CLI, MCP) and consumers/ (Kafka, file import) call it.
"""
