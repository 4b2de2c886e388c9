"""All settings, from the environment (prefix NOUMENA_). One class; docs/settings.md is generated from it, so every
field carries a description."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from domain.ports import KeyStore, TenantWriteLocks


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="NOUMENA_", extra="ignore")

    home: Path = Field(default=Path(".noumena"), description="Data directory: event log, DuckDB files, rejects.")
    event_store: Literal["sqlite", "postgres", "popo"] = Field(
        default="sqlite", description="sqlite (embedded file in home), postgres (shared), popo (memory, tests)."
    )
    pg_host: str = Field(default="127.0.0.1", description="PostgreSQL host (with event_store=postgres).")
    pg_port: int = Field(default=5432, description="PostgreSQL port.")
    pg_user: str = Field(default="noumena", description="PostgreSQL user.")
    pg_password: SecretStr = Field(default=SecretStr("noumena"), description="PostgreSQL password.")
    pg_dbname: str = Field(default="noumena", description="PostgreSQL database.")
    pg_schema: str = Field(default="", description="PostgreSQL schema for the event tables (default: public).")
    write_lock_wait_seconds: float = Field(default=30.0, gt=0, le=600, description="With event_store=postgres, "
                                           "writers of one tenant take turns across processes; a write that waited "
                                           "this long for its turn is refused as retryable (HTTP 503, Retry-After).")
    projection_batch_size: int = Field(default=2000, ge=1, description="Events per DuckDB transaction when"
                                       " the projector follows the log.")
    projection_poll_interval: float = Field(default=0.2, gt=0, description="Seconds the projector waits when"
                                            " the log has nothing new.")
    live_read_model_threads: int = Field(default=1, ge=1, le=64, description="DuckDB threads of the live read"
                                         " model a serving process follows the log into and reads from: one lets"
                                         " the requests' own threads keep the cores while a large query or the"
                                         " redaction after a forget runs (a rebuild elsewhere uses every core).")
    snapshot_interval: float = Field(default=5.0, ge=0, description="Seconds between snapshot publications"
                                     " (only when changed; 0: only on request).")
    state_snapshot_every: int = Field(default=2_000, ge=0, description="A writing process has a tenant's"
                                      " folded state (what its rules decide on) snapshotted into <home>/state/, by"
                                      " a snapshotter process of its own, each time it is this many events ahead"
                                      " of its last request (a delta file of the buckets changed since), so a"
                                      " restart, also after a crash, folds only a short tail of the log (0: no"
                                      " snapshots; see docs/operations.md#restarting-fast).")

    # Kafka ingestion (docs/kafka.md); empty bootstrap = Kafka not configured.
    kafka_bootstrap: str = Field(default="", description="Kafka bootstrap servers, host:port[,host:port...].")
    kafka_topic: str = Field(default="noumena.session-events", description="The session-events topic.")
    kafka_dlq_topic: str = Field(default="noumena.session-events.dlq", description="The dead-letter topic.")
    kafka_group: str = Field(default="noumena", description="Consumer group: every process writing one event log"
                             " uses the same group.")
    kafka_batch_size: int = Field(default=500, ge=1, le=100_000, description="Most records per poll and write.")
    kafka_poll_timeout_ms: int = Field(default=500, ge=1, description="How long a poll waits for records.")
    kafka_session_timeout_ms: int = Field(default=45_000, ge=1_000, description="A silent consumer's partitions"
                                          " move to another after this.")
    kafka_instance_id: str = Field(default="", description="Static group membership id (default: derived from the"
                                   " host name and a process slot on that host; see docs/kafka.md).")
    kafka_static_membership: bool = Field(default=True, description="Join the group as a static member, so a"
                                          " restarted process gets its partitions back at once.")
    kafka_park_topic: str = Field(default="", description="Where inputs waiting for a dependency are parked"
                                  " (default: <topic>.parked).")
    kafka_park_retry_seconds: float = Field(default=2.0, gt=0, le=3600, description="Pause between two tries"
                                            " of a parked input.")
    kafka_park_max_seconds: float = Field(default=300.0, ge=0, description="A parked input still failing this"
                                          " long after it was first parked is dead-lettered (0: never park).")
    kafka_park_max_attempts: int = Field(default=100, ge=0, description="A parked input tried this many times"
                                         " is dead-lettered (0: never park).")
    kafka_max_message_bytes: int = Field(default=0, ge=0, description="The largest record the DLQ and park"
                                         " topics accept (0: read `max.message.bytes` from the broker).")
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="How to reach the brokers.")
    kafka_sasl_mechanism: str = Field(default="", description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.")
    kafka_sasl_username: str = Field(default="", description="SASL user name.")
    kafka_sasl_password: SecretStr = Field(default=SecretStr(""), description="SASL password.")
    kafka_ssl_cafile: str = Field(default="", description="CA bundle to verify the brokers with SSL.")

    def park_topic(self) -> str:
        """The topic parked inputs wait on: NOUMENA_KAFKA_PARK_TOPIC, else `<topic>.parked`."""
        return self.kafka_park_topic or f"{self.kafka_topic}.parked"

    # HTTP API and MCP (docs/http-mcp.md).
    environment: Literal["development", "production"] = Field(
        default="development", description="Outside development, `serve` refuses to start without an admin key.")
    admin_key: SecretStr = Field(default=SecretStr(""), description="The key that manages tenants and API keys.")
    api_host: str = Field(default="127.0.0.1", description="Where `serve` listens (`--host` overrides).")
    api_port: int = Field(default=8000, ge=0, le=65535, description="Where `serve` listens (`--port` overrides).")
    api_keys_file: Path | None = Field(default=None, description="Hashed API keys (default: <home>/api_keys.json).")
    api_read_wait_seconds: float = Field(default=5.0, ge=0, le=60, description="How long a read with"
                                         " `min_position` waits for the projection before a 503.")
    api_max_batch: int = Field(default=1000, ge=1, le=100_000, description="Most envelopes per POST /v1/events.")
    api_max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024, le=1024**3, description="Most bytes a request"
                                    " body may carry (8 MiB); larger bodies are refused with 413 before they are"
                                    " read whole. Checked after the key, so an unauthenticated body is never read.")
    api_body_timeout_seconds: float = Field(default=30.0, gt=0, le=3600, description="How long a request body may"
                                            " take to arrive whole; a body idle or trickling past it is answered"
                                            " 408 and its connection closed (it would hold a worker).")

    def api_keys_path(self) -> Path:
        return self.api_keys_file or self.home / "api_keys.json"

    def unsafe_for_serving(self) -> str | None:
        """Why `serve` must not start with these settings (None: safe). Development allows no admin key."""
        key = self.admin_key.get_secret_value()
        if key and admin_key_bits(key) < ADMIN_KEY_MIN_BITS:
            return (f"NOUMENA_ADMIN_KEY is too weak (about {admin_key_bits(key):.0f} bits; at least"
                    f" {ADMIN_KEY_MIN_BITS} needed): use e.g. $(openssl rand -hex 32)")
        if not key and self.environment != "development":
            return "NOUMENA_ADMIN_KEY is not set; it is required outside NOUMENA_ENVIRONMENT=development"
        return None

    kek_file: Path | None = Field(default=None, description="The key-encryption key that wraps PostgreSQL's data "
                                  "keys (default: <home>/keys.kek); every process of one store must share it.")
    encrypt_content: bool = Field(default=True, description="Seal content fields with per-subject data keys "
                                  "(crypto-shredding). Turning it off makes `forget` unable to erase.")
    extractor: Literal["structured", "llm"] = Field(
        default="structured", description="structured: the payload's own facts; llm: plus an LLM's extraction.")
    llm_url: str = Field(default="", description="OpenAI-compatible base URL, e.g. https://host/v1.")
    llm_model: str = Field(default="", description="The model the LLM extractor asks.")
    llm_api_key: SecretStr = Field(default=SecretStr(""), description="Bearer key for the LLM endpoint.")
    llm_timeout_seconds: float = Field(default=20.0, gt=0, le=300, description="Bound on each extraction call.")
    llm_retries: int = Field(default=2, ge=0, le=10, description="Retries on timeouts, connection errors, 429"
                             " and 5xx.")
    # Semantic search (docs/embedders.md).
    embedder: Literal["wordllama", "openai", "none"] = Field(
        default="wordllama", description="wordllama: the offline 256-d model shipped in its wheel; openai: any "
        "OpenAI-compatible /v1/embeddings endpoint; none: lexical search only.")
    embedder_url: str = Field(default="", description="OpenAI-compatible base URL, e.g. https://host/v1.")
    embedder_model: str = Field(default="", description="The embedding model to ask (NOUMENA_EMBEDDER=openai).")
    embedder_api_key: SecretStr = Field(default=SecretStr(""), description="Bearer key for the embedding "
                                        "endpoint.")
    embedder_dimensions: int = Field(default=0, ge=0, le=65_536, description="What the model answers; every "
                                     "vector is checked against it (required with NOUMENA_EMBEDDER=openai).")
    embedder_timeout_seconds: float = Field(default=10.0, gt=0, le=300, description="Bound on each request.")
    embedder_batch_size: int = Field(default=64, ge=1, le=2048, description="Most texts per request.")
    embedder_max_chars: int = Field(default=6000, ge=1, description="Longer texts are cut to this many "
                                    "characters before they are sent (endpoints refuse inputs over their limit).")
    disuse_period_days: float = Field(default=30.0, gt=0, description="Archive facts whose activation stayed "
                                      "below tau for every agent this long (`noumena sweep`).")
    recall_flush_seconds: float = Field(default=60.0, ge=0, le=3600, description="Served perspectives, contexts "
                                        "and searches record their uses in memory, at most one per agent, fact and "
                                        "hour, and write them as one event per tenant this often (and at a clean "
                                        "shutdown); a crash loses at most this long of uses. 0: one event per "
                                        "read, at once.")
    evidence: Literal["reproducible", "full"] = Field(default="reproducible", description="What `explain` keeps "
                                                      "of a served perspective in <home>/evidence.sqlite: its request "
                                                      "and log position (computed again on `explain`), or the whole "
                                                      "answer. Contexts and searches keep their whole answer.")
    evidence_max_bytes: int = Field(default=256 * 1024 * 1024, ge=1024 * 1024, description="Bytes of evidence kept "
                                    "at most (the oldest go first).")
    evidence_max_age_days: float = Field(default=30.0, gt=0, description="Evidence older than this is dropped.")

    @property
    def kek_path(self) -> Path:
        return self.kek_file or self.home / "keys.kek"

    def key_store(self) -> KeyStore | None:
        """The data-key store: its own SQLite file in the home, or tables beside the PostgreSQL event store."""
        from infra.adapters.keys.memory import MemoryKeyStore
        from infra.adapters.keys.postgres import PostgresKeyStore
        from infra.adapters.keys.sqlite import SQLiteKeyStore

        if not self.encrypt_content:
            return None
        if self.event_store == "sqlite":
            return SQLiteKeyStore(self.home / "keys.sqlite")
        if self.event_store == "postgres":
            return PostgresKeyStore(self.pg_connect_kwargs(), self.pg_schema, self.kek_path)
        return MemoryKeyStore()

    def pg_connect_kwargs(self) -> dict[str, object]:
        """psycopg's connection arguments for the PostgreSQL server of the event store."""
        return {"host": self.pg_host, "port": self.pg_port, "user": self.pg_user,
                "password": self.pg_password.get_secret_value(), "dbname": self.pg_dbname}

    def tenant_write_locks(self) -> TenantWriteLocks | None:
        """Writer locks per tenant across processes: on PostgreSQL (SQLite's writers retry on a conflict)."""
        if self.event_store != "postgres":
            return None
        from infra.adapters.writer_locks import PostgresTenantWriteLocks

        return PostgresTenantWriteLocks(self.pg_connect_kwargs(), self.pg_schema, self.write_lock_wait_seconds)

    def event_store_env(self) -> dict[str, str]:
        """The environment eventsourcing's factory reads, built from our settings."""
        if self.event_store == "sqlite":
            self.home.mkdir(parents=True, exist_ok=True)
            return {
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": str(self.home / "events.sqlite"),
                "SQLITE_LOCK_TIMEOUT": "30",
            }
        if self.event_store == "postgres":
            env = {
                "PERSISTENCE_MODULE": "eventsourcing.postgres",
                "POSTGRES_HOST": self.pg_host,
                "POSTGRES_PORT": str(self.pg_port),
                "POSTGRES_USER": self.pg_user,
                "POSTGRES_PASSWORD": self.pg_password.get_secret_value(),
                "POSTGRES_DBNAME": self.pg_dbname,
            }
            if self.pg_schema:
                env["POSTGRES_SCHEMA"] = self.pg_schema
            return env
        return {"PERSISTENCE_MODULE": "eventsourcing.popo"}


ADMIN_KEY_MIN_BITS = 64
_COMMON_KEYS = frozenset({"changethis", "admin", "secret", "password"})


def admin_key_bits(key: str) -> float:
    """A conservative estimate of the admin key's strength in bits: its length times log2 of the number of
    distinct characters it uses; 0 below 16 characters, for fewer than 8 distinct characters (`aaaaaaaaaaaaaaaa`)
    or for a run with one or two steps (`0123456789abcdef`, `abababab...`). 32 random hex characters score about
    120, `secrets.token_urlsafe(32)` about 220."""
    if len(key) < 16 or key.lower() in _COMMON_KEYS or len(set(key)) < 8:
        return 0.0
    steps = {ord(b) - ord(a) for a, b in zip(key, key[1:], strict=False)}
    if len(steps) <= 2:
        return 0.0
    return len(key) * math.log2(len(set(key)))


def for_another_process(settings: Settings) -> dict[str, object]:
    """`settings` as JSON values, secrets included, for a worker process that opens the same stores (it is handed
    them through a pipe: infra/runtime/purge_worker.py, infra/runtime/state_snapshotter.py)."""
    values: dict[str, object] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        values[name] = (value.get_secret_value() if isinstance(value, SecretStr)
                        else str(value) if isinstance(value, Path) else value)
    return values
