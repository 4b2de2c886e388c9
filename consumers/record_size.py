"""Records that fit the broker: a topic's size limit, a record's size, and a dead letter cut down to fit.

Kafka refuses a record batch larger than the topic's `max.message.bytes` (default: the broker's
`message.max.bytes`, 1,048,588 bytes). A dead letter is the original record plus headers of ours, so an input
just under the limit makes a dead letter just over it: producing it fails every time, and a consumer that waits
for its dead letters before storing its position never gets past it. So the producers of dead letters and parked
inputs learn the limit from the broker (`topic_max_bytes`) and set their request size to it, and a dead letter
that would not fit is stored truncated (`truncated`), with the original's size and SHA-256, and its location in
the standard source headers (topic, partition, offset) so that it can be read again while the topic keeps it
(`consumers/dead_letters/records.py`, which builds on these sizes).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 1_048_588
"""Kafka's default `message.max.bytes` (and so every topic's default `max.message.bytes`)."""
BATCH_OVERHEAD = 61 + 21
"""A v2 record batch's header (61 bytes) plus a record's own framing (attributes, deltas, lengths: up to 21)."""
HEADER_OVERHEAD = 10
"""Per header: the varint lengths of its name and value."""
SEAL_OVERHEAD = 256
"""What sealing adds to a value at most: the magic, the key id and a newline, the nonce and the GCM tag."""
MARGIN = 512
"""Room kept free under the limit (a broker's own accounting may differ from ours by a few bytes)."""


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]]) -> int:
    """An upper bound of the record's size in a batch of its own, uncompressed."""
    size = BATCH_OVERHEAD + len(key or b"") + len(value or b"")
    return size + sum(len(name.encode()) + len(data) + HEADER_OVERHEAD for name, data in headers)


def topic_max_bytes(options: dict[str, Any], topic: str, configured: int = 0) -> int:
    """The largest record `topic` accepts: `configured` if set, else the topic's `max.message.bytes` read with
    the admin client. If the broker does not say (no DescribeConfigs permission), Kafka's default, with a
    warning naming the setting that overrides it (NOUMENA_KAFKA_MAX_MESSAGE_BYTES)."""
    if configured:
        return configured
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(**options, client_id="noumena-limits")
    except KafkaError as error:
        log.warning("cannot ask the broker for %s's max.message.bytes (%r); assuming %d bytes: set "
                    "NOUMENA_KAFKA_MAX_MESSAGE_BYTES if the topic's limit differs", topic, error, DEFAULT_MAX_BYTES)
        return DEFAULT_MAX_BYTES
    try:
        found = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, ["max.message.bytes"])],
                                       config_filter="all")
        return int(found["topic"][topic]["max.message.bytes"]["value"])
    except (KafkaError, KeyError, TypeError, ValueError) as error:
        log.warning("cannot read %s's max.message.bytes (%r); assuming %d bytes: set "
                    "NOUMENA_KAFKA_MAX_MESSAGE_BYTES if the topic's limit differs", topic, error, DEFAULT_MAX_BYTES)
        return DEFAULT_MAX_BYTES
    finally:
        admin.close()
