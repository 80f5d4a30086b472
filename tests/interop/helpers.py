"""Small helpers for interop tests: topic creation and reading through real clients."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int, **configs) -> None:
    """Create a topic with confluent-kafka's AdminClient (a real peer, not our code)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1,
                  config={k.replace("_", "."): str(v) for k, v in configs.items()})],
        operation_timeout=10)
    futures[name].result(timeout=30)
