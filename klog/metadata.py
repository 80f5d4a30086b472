"""What a client knows of the cluster: brokers, and each topic's partitions and leaders. Pure.

The producer and the consumer share this object. It decides *when* metadata must be fetched
(a topic we want is unknown, somebody reported stale leadership, or it is older than
``metadata_max_age_ms``), builds the Metadata request and absorbs the answer; the I/O layer
only carries them. Node ids are the brokers' (for klog: one per appliance worker).

:func:`read_replica_for` is the one place that decides where a partition is read from. Any
worker of a klog appliance serves a Fetch for any partition of that appliance, and Metadata
says which workers belong together through their rack (``klog-appliance-<broker.id>``); reads
then spread over those workers. Other brokers are read from the leader, as Kafka clients do.
"""

from __future__ import annotations

import logging
import zlib

from klog.protocol.apis import metadata
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

NO_LEADER = -1
APPLIANCE_RACK_PREFIX = "klog-appliance-"


class ClusterMetadata:
    """Brokers and partition leaders, with the refresh policy. Not thread-safe: the caller
    serializes access (the blocking clients under their lock, asyncio on its loop)."""

    def __init__(self, *, max_age_ms: int = 300_000, retry_backoff_ms: int = 100,
                 allow_auto_create: bool = False):
        self.brokers: dict[int, tuple[str, int]] = {}
        self.racks: dict[int, str | None] = {}
        self.leaders: dict[str, tuple[int, ...]] = {}  # topic -> leader node per partition
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

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        return self.brokers.get(node_id)

    def describe(self, node_id: int) -> str:
        address = self.brokers.get(node_id)
        return f"node {node_id}" if address is None else f"{address[0]}:{address[1]}"

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
                stale = stale or code.retriable
                continue
            self.errors.pop(topic.name, None)
            leaders = [NO_LEADER] * len(topic.partitions)
            for p in topic.partitions:
                if 0 <= p.partition_index < len(leaders) and p.error_code == 0:
                    leaders[p.partition_index] = p.leader_id
            self.leaders[topic.name] = tuple(leaders)
            stale = stale or NO_LEADER in leaders
        self._log_changes(before_brokers, before_leaders)
        self._updated_ms = now_ms
        self._stale = stale
        self._retry_at_ms = now_ms + self.retry_backoff_ms if stale else 0
        self.version += 1

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
    rack = cluster.racks.get(leader)
    if leader == NO_LEADER or not rack or not rack.startswith(APPLIANCE_RACK_PREFIX):
        return leader
    peers = sorted(node for node, r in cluster.racks.items() if r == rack)
    return peers[(zlib.crc32(f"{topic}-{partition}".encode()) + salt) % len(peers)]
