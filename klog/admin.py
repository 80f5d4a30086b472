"""klog.Admin: create, delete, list and describe topics; list offsets.

Example::

    with klog.Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        admin.create_topic("clicks", partitions=6, configs={"retention.ms": "86400000"})
        print(admin.describe_topic("clicks").partitions)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from klog.errors import KafkaError, raise_for
from klog.protocol.apis import (
    create_topics,
    delete_topics,
    describe_configs,
    list_offsets,
    metadata,
)
from klog.protocol.errors import ErrorCode
from klog.wire import BrokerConnection, connect_any

TOPIC_RESOURCE = 2
EARLIEST, LATEST = -2, -1


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionInfo, ...]
    internal: bool = False
    configs: dict[str, str] = field(default_factory=dict)


class Admin:
    """Administrative calls against one klog appliance (or any Kafka broker)."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "klog-admin",
                 request_timeout_ms: int = 30_000):
        self.bootstrap_servers = bootstrap_servers
        self._timeout_ms = request_timeout_ms
        self._client_id = client_id
        self._conn = connect_any(bootstrap_servers, client_id=client_id,
                                 timeout_s=request_timeout_ms / 1000)
        self._leaders: dict[int, BrokerConnection] = {}

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()
        for conn in self._leaders.values():
            conn.close()
        self._leaders.clear()

    def _metadata(self, topics: list[str] | None):
        wanted = None if topics is None else [metadata.MetadataRequestTopic(name=t)
                                               for t in topics]
        return self._conn.call(metadata, topics=wanted, allow_auto_topic_creation=False)

    def list_topics(self) -> list[str]:
        return sorted(t.name for t in self._metadata(None).topics)

    def create_topic(self, name: str, partitions: int = -1, *, replication_factor: int = -1,
                     configs: dict[str, str] | None = None, validate_only: bool = False) -> None:
        """Create a topic; raises KafkaError (TOPIC_ALREADY_EXISTS, INVALID_CONFIG, ...)."""
        topic = create_topics.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=replication_factor,
            assignments=[],
            configs=[create_topics.CreatableTopicConfig(name=k, value=v)
                     for k, v in (configs or {}).items()])
        answer = self._conn.call(create_topics, topics=[topic], timeout_ms=self._timeout_ms,
                                 validate_only=validate_only)
        for result in answer.topics:
            raise_for(result.error_code, result.error_message, topic=result.name,
                      broker=self._conn.address)

    def delete_topic(self, name: str) -> None:
        answer = self._conn.call(delete_topics, topic_names=[name], timeout_ms=self._timeout_ms)
        for result in answer.responses:
            raise_for(result.error_code, topic=result.name, broker=self._conn.address)

    def describe_topic(self, name: str) -> TopicDescription:
        answer = self._metadata([name])
        (topic,) = answer.topics
        raise_for(topic.error_code, topic=name, broker=self._conn.address)
        partitions = tuple(sorted(
            (PartitionInfo(p.partition_index, p.leader_id, tuple(p.replica_nodes),
                           tuple(p.isr_nodes)) for p in topic.partitions),
            key=lambda p: p.partition))
        return TopicDescription(name, partitions, topic.is_internal, self.topic_configs(name))

    def topic_configs(self, name: str) -> dict[str, str]:
        resource = describe_configs.DescribeConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name=name, configuration_keys=None)
        answer = self._conn.call(describe_configs, resources=[resource], include_synonyms=False,
                                 include_documentation=False)
        (result,) = answer.results
        raise_for(result.error_code, result.error_message, topic=name,
                  broker=self._conn.address)
        return {c.name: c.value for c in result.configs}

    def _leader_connection(self, node_id: int, brokers) -> BrokerConnection:
        if node_id not in self._leaders:
            broker = next((b for b in brokers if b.node_id == node_id), None)
            if broker is None:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"node {node_id} is unknown")
            self._leaders[node_id] = BrokerConnection(
                broker.host, broker.port, client_id=self._client_id,
                timeout_s=self._timeout_ms / 1000)
        return self._leaders[node_id]

    def list_offsets(self, topic: str, timestamp: int = LATEST) -> dict[int, int]:
        """Offset per partition: LATEST (-1, the high watermark), EARLIEST (-2), or the first
        offset whose timestamp is at or after `timestamp` ms (-1 when there is none)."""
        answer = self._metadata([topic])
        (described,) = answer.topics
        raise_for(described.error_code, topic=topic, broker=self._conn.address)
        by_leader: dict[int, list[int]] = {}
        for p in described.partitions:
            by_leader.setdefault(p.leader_id, []).append(p.partition_index)
        offsets = {}
        for leader, partitions in by_leader.items():
            conn = self._leader_connection(leader, answer.brokers)
            request_topic = list_offsets.ListOffsetsTopic(name=topic, partitions=[
                list_offsets.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1,
                                                  timestamp=timestamp) for p in partitions])
            reply = conn.call(list_offsets, replica_id=-1, isolation_level=0,
                              topics=[request_topic])
            for t in reply.topics:
                for p in t.partitions:
                    raise_for(p.error_code, topic=topic, partition=p.partition_index,
                              broker=conn.address)
                    offsets[p.partition_index] = p.offset
        return dict(sorted(offsets.items()))
