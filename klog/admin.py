"""klog.Admin: create, delete, list and describe topics; list offsets; inspect consumer groups,
change their committed offsets while they are empty, and delete them; list and describe
transactions.

Example::

    with klog.Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        admin.create_topic("clicks", partitions=6, configs={"retention.ms": "86400000"})
        print(admin.describe_topic("clicks").partitions)
        print(admin.list_group_offsets("loader"))   # {TopicPartition: offset or None}

Group calls go to the group's coordinator, found with FindCoordinator. A coordinator can be
loading its groups, or the group can have moved (an appliance worker restarted); those answers
are retried for ``COORDINATOR_WAIT_S`` before the error reaches the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from klog.admin_groups import GroupDescription, GroupListing, describe_group
from klog.admin_records import delete_records_before
from klog.admin_transactions import (
    TransactionDescription,
    TransactionListing,
    describe_transaction,
)
from klog.errors import BrokerUnavailableError, KafkaError, error_for, raise_for
from klog.protocol.apis import (
    create_partitions,
    create_topics,
    delete_groups,
    delete_topics,
    describe_configs,
    describe_groups,
    describe_transactions,
    find_coordinator,
    list_groups,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
)
from klog.protocol.error_codes import ErrorCode
from klog.security import ClientSecurity
from klog.tls import client_ssl_context
from klog.types import TopicPartition
from klog.wire import BrokerConnection, connect_any

TOPIC_RESOURCE = 2
EARLIEST, LATEST = -2, -1
GROUP_KEY = 0  # FindCoordinator key_type of a consumer group
TXN_KEY = 1  # ... and of a transactional id
COORDINATOR_WAIT_S = 5.0
COORDINATOR_BACKOFF_S = 0.1
COORDINATOR_ERRORS = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                ErrorCode.NOT_COORDINATOR})


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
                 request_timeout_ms: int = 30_000, security_protocol: str = "PLAINTEXT",
                 sasl_mechanism: str | None = None, sasl_plain_username: str | None = None,
                 sasl_plain_password: str | None = None, **tls_options):
        """The security options are the producer's and consumer's (kafka-python's names):
        ``security_protocol``, the SASL ones (klog/security.py) and, in ``tls_options``,
        klog.tls's ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``, ``ssl_password``,
        ``ssl_check_hostname``; ValueError when they do not fit together."""
        self.bootstrap_servers = bootstrap_servers
        self._timeout_ms = request_timeout_ms
        self._client_id = client_id
        self._security = ClientSecurity(security_protocol, sasl_mechanism,
                                        sasl_plain_username, sasl_plain_password)
        self._ssl_context = client_ssl_context(security_protocol=security_protocol,
                                               **tls_options)
        self._conn = connect_any(bootstrap_servers, client_id=client_id,
                                 timeout_s=request_timeout_ms / 1000,
                                 ssl_context=self._ssl_context, security=self._security)
        self._nodes: dict[int, BrokerConnection] = {}

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()
        for conn in self._nodes.values():
            conn.close()
        self._nodes.clear()

    def request(self, api, **fields):
        """One request of `api` (a module of klog.protocol.apis) to the bootstrap broker, at
        the highest version both speak; the response body as it came (errors inside it are
        the caller's to read). For the calls this class has no method for (the ACL APIs)."""
        return self._conn.call(api, **fields)

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

    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        """Grow a topic to `count` partitions in all (Kafka's CreatePartitions); raises
        KafkaError (INVALID_PARTITIONS when `count` is not above the current count, ...)."""
        topic = create_partitions.CreatePartitionsTopic(name=name, count=count, assignments=None)
        answer = self._conn.call(create_partitions, topics=[topic], timeout_ms=self._timeout_ms,
                                 validate_only=validate_only)
        for result in answer.results:
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
        broker = next((b for b in brokers if b.node_id == node_id), None)
        if broker is None:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"node {node_id} is unknown")
        return self._node(node_id, broker.host, broker.port)

    def _node(self, node_id: int, host: str, port: int) -> BrokerConnection:
        """The open connection to a node, made (again) when missing, closed or moved."""
        conn = self._nodes.get(node_id)
        if conn is None or conn.closed or conn.address != f"{host}:{port}":
            if conn is not None:
                conn.close()
            conn = self._nodes[node_id] = BrokerConnection(
                host, port, client_id=self._client_id, timeout_s=self._timeout_ms / 1000,
                ssl_context=self._ssl_context, security=self._security)
        return conn

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

    def delete_records(self, offsets: dict[TopicPartition, int]
                       ) -> dict[TopicPartition, int | KafkaError]:
        """Kafka's DeleteRecords: move each partition's log start up to its offset (-1: the
        high watermark), on its leader. Per partition, the new low watermark or the
        KafkaError (OFFSET_OUT_OF_RANGE beyond the high watermark, ...). klog/admin_records.py."""
        return delete_records_before(self, offsets, timeout_ms=self._timeout_ms)

    # -- consumer groups ----------------------------------------------------------------------

    def _on_coordinator(self, group_id: str, ask: Callable[[BrokerConnection], tuple],
                        key_type: int = GROUP_KEY):
        """``ask(conn) -> (answer, error_code)`` on the coordinator of ``group_id`` (with
        ``key_type=TXN_KEY``: of that transactional id); returns
        ``(coordinator node id, answer)``. Coordinator errors and a lost connection are retried
        for COORDINATOR_WAIT_S; any other error code raises KafkaError."""
        deadline = time.monotonic() + COORDINATOR_WAIT_S
        while True:
            found = self._conn.call(find_coordinator, key=group_id, key_type=key_type)
            code, message, where = found.error_code, found.error_message, self._conn.address
            if code == ErrorCode.NONE:
                try:
                    conn = self._node(found.node_id, found.host, found.port)
                    answer, code = ask(conn)
                    message, where = None, conn.address
                except BrokerUnavailableError:
                    if time.monotonic() >= deadline:
                        raise
                    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                if code == ErrorCode.NONE:
                    return found.node_id, answer
            if code not in COORDINATOR_ERRORS or time.monotonic() >= deadline:
                what = "group" if key_type == GROUP_KEY else "transactional id"
                raise error_for(code, f"{what} {group_id!r}" + (f": {message}" if message
                                                                 else ""), broker=where)
            time.sleep(COORDINATOR_BACKOFF_S)

    def list_groups(self) -> list[GroupListing]:
        """Every group of every node (each coordinator lists only its own groups)."""
        answer = self._conn.call(metadata, topics=[], allow_auto_topic_creation=False)
        listings = []
        for broker in answer.brokers:
            conn = self._node(broker.node_id, broker.host, broker.port)
            reply = conn.call(list_groups)
            raise_for(reply.error_code, broker=conn.address)
            listings += [GroupListing(g.group_id, g.protocol_type, broker.node_id)
                         for g in reply.groups]
        return sorted(listings)

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        """State, protocol and members (with decoded subscriptions and assignments) per group;
        a group nobody knows comes back in state "Dead" with no members, as from Kafka."""
        def ask(conn, group_id):
            reply = conn.call(describe_groups, groups=[group_id],
                              include_authorized_operations=False)
            (described,) = reply.groups
            return described, described.error_code

        described = {}
        for group_id in group_ids:
            node, answer = self._on_coordinator(group_id, lambda c, g=group_id: ask(c, g))
            described[group_id] = describe_group(answer, node)
        return described

    def list_group_offsets(self, group_id: str,
                           partitions: Iterable[TopicPartition] | None = None
                           ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets: of ``partitions``, or of every partition it has
        committed (None: nothing committed for that partition)."""
        wanted = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            wanted = [offset_fetch.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                      for t, ps in by_topic.items()]

        def ask(conn):
            reply = conn.call(offset_fetch, group_id=group_id, topics=wanted)
            return reply, reply.error_code

        _, reply = self._on_coordinator(group_id, ask)
        offsets = {}
        for topic in reply.topics:
            for p in topic.partitions:
                raise_for(p.error_code, f"group {group_id!r}", topic=topic.name,
                          partition=p.partition_index)
                offsets[TopicPartition(topic.name, p.partition_index)] = (
                    None if p.committed_offset < 0 else p.committed_offset)
        return dict(sorted(offsets.items()))

    def alter_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit ``offsets`` for a group that has no members (an administrator's commit,
        generation -1). Raises KafkaError NON_EMPTY_GROUP while the group has members (the
        coordinator answers UNKNOWN_MEMBER_ID: only members may commit then), and KafkaError
        for a partition that does not exist."""
        by_topic: dict[str, list] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(offset_commit.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata=""))
        topics = [offset_commit.OffsetCommitRequestTopic(name=t, partitions=ps)
                  for t, ps in by_topic.items()]

        def ask(conn):
            reply = conn.call(offset_commit, group_id=group_id, generation_id_or_member_epoch=-1,
                              member_id="", group_instance_id=None, retention_time_ms=-1,
                              topics=topics)
            codes = [p.error_code for t in reply.topics for p in t.partitions]
            return reply, next((c for c in codes if c in COORDINATOR_ERRORS), ErrorCode.NONE)

        _, reply = self._on_coordinator(group_id, ask)
        for topic in reply.topics:
            for p in topic.partitions:
                if p.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    raise KafkaError(ErrorCode.NON_EMPTY_GROUP,
                                     f"group {group_id!r} has members; its offsets can be "
                                     "changed only while it is empty (stop its consumers)")
                raise_for(p.error_code, f"group {group_id!r}", topic=topic.name,
                          partition=p.partition_index)

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, KafkaError | None]:
        """Delete empty groups with their committed offsets. Per group: None when deleted, or
        the KafkaError (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...) that kept it."""
        def ask(conn, group_id):
            (result,) = conn.call(delete_groups, groups_names=[group_id]).results
            code = result.error_code
            return code, code if code in COORDINATOR_ERRORS else ErrorCode.NONE

        results: dict[str, KafkaError | None] = {}
        for group_id in group_ids:
            try:
                _, code = self._on_coordinator(group_id, lambda c, g=group_id: ask(c, g))
            except KafkaError as exc:
                results[group_id] = exc
                continue
            results[group_id] = None if code == ErrorCode.NONE else error_for(
                code, f"group {group_id!r}")
        return results

    def delete_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                             ) -> dict[TopicPartition, KafkaError | None]:
        """OffsetDelete (KIP-496): remove some committed offsets of a group. Per partition:
        None when gone (or none was committed), or the KafkaError (GROUP_SUBSCRIBED_TO_TOPIC:
        a live member consumes the topic; UNKNOWN_TOPIC_OR_PARTITION). A group-level refusal
        (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP) raises KafkaError."""
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)

        def ask(conn):
            answer = conn.call(offset_delete, group_id=group_id, topics=[
                offset_delete.OffsetDeleteRequestTopic(name=t, partitions=[
                    offset_delete.OffsetDeleteRequestPartition(partition_index=p) for p in ps])
                for t, ps in by_topic.items()])
            return answer, answer.error_code

        _, answer = self._on_coordinator(group_id, ask)
        return {TopicPartition(t.name, p.partition_index): None if p.error_code == 0
                else error_for(p.error_code, topic=t.name, partition=p.partition_index)
                for t in answer.topics for p in t.partitions}

    # -- transactions -------------------------------------------------------------------------

    def list_transactions(self, states: Iterable[str] = (),
                          producer_ids: Iterable[int] = ()) -> list[TransactionListing]:
        """Every transactional id of every node (each coordinator lists its own), optionally
        only those in ``states`` ("Ongoing", ...) or of ``producer_ids``."""
        answer = self._conn.call(metadata, topics=[], allow_auto_topic_creation=False)
        listings = []
        for broker in answer.brokers:
            conn = self._node(broker.node_id, broker.host, broker.port)
            reply = conn.call(list_transactions, state_filters=list(states),
                              producer_id_filters=list(producer_ids))
            raise_for(reply.error_code, broker=conn.address)
            listings += [TransactionListing(t.transactional_id, t.producer_id,
                                            t.transaction_state, broker.node_id)
                         for t in reply.transaction_states]
        return sorted(listings)

    def describe_transactions(self, transactional_ids: Iterable[str]
                              ) -> dict[str, TransactionDescription]:
        """State, producer id and epoch, timeout, start time and partitions per transactional
        id, from its coordinator. An id nobody knows raises TRANSACTIONAL_ID_NOT_FOUND."""
        def ask(conn, transactional_id):
            reply = conn.call(describe_transactions, transactional_ids=[transactional_id])
            (state,) = reply.transaction_states
            return state, state.error_code

        described = {}
        for transactional_id in transactional_ids:
            node, state = self._on_coordinator(
                transactional_id, lambda c, t=transactional_id: ask(c, t), TXN_KEY)
            described[transactional_id] = describe_transaction(state, node)
        return described
