"""Topic creation for `noumena kafka create-topics`, tests and benchmarks (clusters may forbid auto-creation)."""

from __future__ import annotations

from typing import Any


def ensure_topic(options: dict[str, Any], topic: str, partitions: int = 1, replication: int = 1) -> bool:
    """Create `topic` unless it exists; True if it was created now."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(**options, client_id="noumena-admin")
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication)])
        return True
    except TopicAlreadyExistsError:
        return False
    finally:
        admin.close()
