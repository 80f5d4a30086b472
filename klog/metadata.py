"""What a client knows of the cluster: brokers, and each topic's partitions and leaders. Pure.

The producer and the consumer share this object. It decides *when* metadata must be fetched
(a topic we want is unknown, somebody reported stale leadership, or it is older than
``metadata_max_age_ms``), builds the Metadata request and absorbs the answer; the I/O layer
only carries them. Node ids are the brokers' (for klog: one per appliance worker).

:func:`read_replica_for` is the one place that decides where a partition is read from. Any
worker of a klog appliance serves a Fetch for any partition of that appliance. A klog broker
says so in its ApiVersions v3 answer: the supported feature ``klog.nodes-per-appliance``
(min = max = 100) tells that node ids are ``broker.id * 100 + worker index``, so the workers of
one appliance are the nodes with the same ``node_id // 100`` (:func:`note_appliance_broker`
records it per broker address as connections open). Reads then spread over the leader's
appliance. Any other broker is read from the leader, as Kafka clients do. (Metadata's rack is
the operator's ``broker.rack``, as Kafka reports it, for rack-aware clients: not klog's sign.)

Leader epochs (Metadata v7+) are kept per partition, sent as ``current_leader_epoch`` in
Fetch and ListOffsets (KIP-320), and guard against going back in time: an answer whose epoch
for a partition is older than one already seen comes from a broker that has not heard of an
election yet, so that partition keeps what we knew (as the Java client and librdkafka do) and
metadata is asked again. A topic that disappears forgets its epochs (recreated, it starts
over from epoch 0).
"""

from __future__ import annotations

import logging
import zlib

from klog.protocol.apis import metadata
from klog.protocol.apis.api_versions import APPLIANCE_FEATURE
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

NO_LEADER = -1
NO_EPOCH = -1
# broker address ("host:port") -> nodes per appliance, for each klog broker this process has
# connected to: a fact about the broker, shared by every client in the process
_APPLIANCE_BROKERS: dict[str, int] = {}


def note_appliance_broker(address: str, answer) -> None:
    """Remember whether the broker at `address` is a klog appliance worker, from its
    ApiVersions answer (v3+ carries supported features; older answers carry none)."""
    for feature in getattr(answer, "supported_features", None) or ():
        if feature.name == APPLIANCE_FEATURE and feature.max_version > 0:
            _APPLIANCE_BROKERS[address] = feature.max_version
            return


def appliance_stride(cluster: ClusterMetadata) -> int | None:
    """Nodes per appliance when the cluster's brokers are klog appliance workers (one of
    them said so on connecting), else None."""
    for host, port in cluster.brokers.values():
        stride = _APPLIANCE_BROKERS.get(f"{host}:{port}")
        if stride:
            return stride
    return None


class ClusterMetadata:
    """Brokers and partition leaders, with the refresh policy. Not thread-safe: the caller
    serializes access (the blocking clients under their lock, asyncio on its loop)."""

    def __init__(self, *, max_age_ms: int = 300_000, retry_backoff_ms: int = 100,
                 allow_auto_create: bool = False):
        self.brokers: dict[int, tuple[str, int]] = {}
        self.racks: dict[int, str | None] = {}
        self.leaders: dict[str, tuple[int, ...]] = {}  # topic -> leader node per partition
        self.epochs: dict[str, tuple[int, ...]] = {}  # topic -> leader epoch per partition
        self.errors: dict[str, ErrorCode] = {}  # topic -> last error the broker gave for it
        self.wanted: set[str] = set()
        self.max_age_ms = max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.allow_auto_create = allow_auto_create
        self.version = 0  # bumped by every update
        self.last_error: str | None = None  # why the last Metadata request got no answer
        self._stale = True
        self._in_flight = False
        self._updated_ms = 0
        self._retry_at_ms = 0

    # what we know -------------------------------------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        leaders = self.leaders.get(topic)
        return None if leaders is None else len(leaders)

    def leader_of(self, topic: str, partition: int) -> int:
        leaders = self.leaders.get(topic)
        if leaders is None or not 0 <= partition < len(leaders):
            return NO_LEADER
        return leaders[partition]

    def leader_epoch_of(self, topic: str, partition: int) -> int:
        """The partition's leader epoch as last seen (NO_EPOCH: unknown, or an old broker)."""
        epochs = self.epochs.get(topic)
        if epochs is None or not 0 <= partition < len(epochs):
            return NO_EPOCH
        return epochs[partition]

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        return self.brokers.get(node_id)

    def describe(self, node_id: int) -> str:
        address = self.brokers.get(node_id)
        return f"node {node_id}" if address is None else f"{address[0]}:{address[1]}"

    def leader_hint(self, topic: str, partition: int, leader_id: int, leader_epoch: int,
                    endpoint: tuple[str, int] | None = None) -> bool:
        """KIP-951: a NOT_LEADER_OR_FOLLOWER answer named the partition's current leader (and,
        in Produce v10, its endpoint). Taken, as Kafka's clients do, only when its epoch is
        newer than the one known and the leader's address is known; True then, and no
        Metadata round trip is needed to go there."""
        leaders, epochs = self.leaders.get(topic), self.epochs.get(topic)
        if (leader_id < 0 or leader_epoch < 0 or leaders is None or epochs is None
                or not 0 <= partition < len(leaders)):
            return False
        if leader_epoch <= epochs[partition] and epochs[partition] != NO_EPOCH:
            return False
        if endpoint is not None:
            self.brokers = {**self.brokers, leader_id: endpoint}
        elif leader_id not in self.brokers:
            return False
        self.leaders[topic] = leaders[:partition] + (leader_id,) + leaders[partition + 1:]
        self.epochs[topic] = epochs[:partition] + (leader_epoch,) + epochs[partition + 1:]
        self.version += 1
        log.info("metadata: %s[%d] led by node %d in epoch %d (the broker's hint)", topic,
                 partition, leader_id, leader_epoch)
        return True

    # when to ask --------------------------------------------------------------------------

    def want(self, topics) -> None:
        """Track these topics; an unknown one makes metadata stale."""
        for topic in topics:
            if topic not in self.wanted:
                self.wanted.add(topic)
                if topic not in self.leaders:
                    self._stale = True

    def mark_stale(self) -> None:
        """Leadership moved or a broker vanished: refresh at the next chance."""
        self._stale = True

    def refresh_due_ms(self, now_ms: int) -> int | None:
        """When the next Metadata request should go out (<= now: now); None while one is in
        flight."""
        if self._in_flight:
            return None
        due = now_ms if self._stale else self._updated_ms + self.max_age_ms
        return max(due, self._retry_at_ms)

    def build_request(self, now_ms: int):
        """The Metadata request for the wanted topics; marks a request in flight."""
        self._in_flight = True
        topics = [metadata.MetadataRequestTopic(name=t) for t in sorted(self.wanted)]
        return metadata.Request(topics=topics, allow_auto_topic_creation=self.allow_auto_create)

    # answers ------------------------------------------------------------------------------

    def update(self, response, now_ms: int) -> None:
        self._in_flight = False
        self.last_error = None
        before_brokers, before_leaders = self.brokers, dict(self.leaders)
        self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        self.racks = {b.node_id: b.rack for b in response.brokers}
        stale = False
        for topic in response.topics:
            code = ErrorCode(topic.error_code)
            if code != ErrorCode.NONE:
                self.errors[topic.name] = code
                self.leaders.pop(topic.name, None)
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    self.epochs.pop(topic.name, None)
                stale = stale or code.retriable
                continue
            self.errors.pop(topic.name, None)
            stale = self._absorb_partitions(topic) or stale
        self._log_changes(before_brokers, before_leaders)
        self._updated_ms = now_ms
        self._stale = stale
        self._retry_at_ms = now_ms + self.retry_backoff_ms if stale else 0
        self.version += 1

    def _absorb_partitions(self, topic) -> bool:
        """One topic's leaders and epochs; True when metadata must be asked again (a
        partition without a leader, or one whose answer was older than what we know)."""
        count = len(topic.partitions)
        leaders, epochs = [NO_LEADER] * count, [NO_EPOCH] * count
        known_leaders, known_epochs = self.leaders.get(topic.name), self.epochs.get(topic.name)
        if known_epochs is not None and len(known_epochs) > count:
            known_leaders = known_epochs = None  # fewer partitions: the topic was recreated
        behind = False
        for p in topic.partitions:
            index = p.partition_index
            if not 0 <= index < count:
                continue
            seen = (known_epochs[index] if known_epochs is not None
                    and index < len(known_epochs) else NO_EPOCH)
            if 0 <= p.leader_epoch < seen:  # an older view: keep ours, ask again
                log.debug("metadata: %s[%d] in leader epoch %d, older than %d: ignored",
                          topic.name, index, p.leader_epoch, seen)
                behind = True
                leaders[index] = (known_leaders[index] if known_leaders is not None
                                  and index < len(known_leaders) else NO_LEADER)
                epochs[index] = seen
                continue
            epochs[index] = max(p.leader_epoch, seen) if p.leader_epoch >= 0 else seen
            if p.error_code == 0:
                leaders[index] = p.leader_id
        self.leaders[topic.name] = tuple(leaders)
        self.epochs[topic.name] = tuple(epochs)
        return behind or NO_LEADER in leaders

    def _log_changes(self, brokers: dict, leaders: dict) -> None:
        if brokers != self.brokers:
            log.info("metadata: brokers now %s",
                     ", ".join(f"{n}={h}:{p}" for n, (h, p) in sorted(self.brokers.items())))
        for topic, now in self.leaders.items():
            if leaders.get(topic) != now:
                log.info("metadata: leaders of %r now %s", topic, list(now))
        for topic, code in self.errors.items():
            if topic in leaders:
                log.info("metadata: topic %r: %s", topic, code.name)

    def failed(self, now_ms: int, reason: str | None = None) -> None:
        """The Metadata request got no answer: retry after the backoff."""
        log.info("metadata request failed: %s; retrying in %d ms", reason,
                 self.retry_backoff_ms)
        self.last_error = reason
        self._in_flight = False
        self._stale = True
        self._retry_at_ms = now_ms + self.retry_backoff_ms


def read_replica_for(cluster: ClusterMetadata, topic: str, partition: int,
                     salt: int = 0) -> int:
    """The node to fetch ``topic``/``partition`` from: the leader, or, when the leader is a
    klog appliance worker, one of that appliance's serving workers chosen by a stable hash of
    the partition and the reader's ``salt`` (so that partitions, and the consumers of one hot
    partition, spread over the appliance's cores)."""
    leader = cluster.leader_of(topic, partition)
    stride = appliance_stride(cluster) if leader != NO_LEADER else None
    if stride is None or leader not in cluster.brokers:
        return leader
    peers = sorted(node for node in cluster.brokers if node // stride == leader // stride)
    return peers[(zlib.crc32(f"{topic}-{partition}".encode()) + salt) % len(peers)]
