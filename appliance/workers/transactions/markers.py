"""Sending a decided transaction's markers: WriteTxnMarkers to each partition's leader, over
the Kafka protocol (as Kafka's TransactionMarkerChannelManager), until every partition has
answered.

Retries are Kafka's: a leader that cannot be reached, a partition whose leader moved
(NOT_LEADER_OR_FOLLOWER, …), a leader that does not serve WriteTxnMarkers yet: the markers
of those partitions are sent again after a backoff, for as long as this worker coordinates
the transaction. A partition whose topic is gone needs no marker. TRANSACTION_COORDINATOR_FENCED
(a newer coordinator exists) stops the sending: the new coordinator finishes the transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

from appliance.workers.replication.link import ReplicaLink
from klog.protocol.apis import write_txn_markers
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

VERSION = 0  # every leader serving WriteTxnMarkers serves v0
BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


class CoordinatorFenced(Exception):
    """A partition leader knows a newer coordinator epoch."""


class MarkerSender:
    """The markers of one worker's coordinator: a connection per leader node, reused."""

    def __init__(self, worker, security):
        self.worker = worker
        self.security = security
        self.links: dict[int, ReplicaLink] = {}
        self.locks: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.sent = 0  # WriteTxnMarkers requests answered (for tests and status)
        self.failing: set[int] = set()  # nodes whose last request failed (logged once)
        self.unserved: set[int] = set()  # nodes that answered they do not serve it (logged)

    async def deliver(self, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, partitions, still_wanted) -> None:
        """Return once every partition of ``partitions`` has its marker (or needs none).
        ``still_wanted()`` false: stop (this worker no longer coordinates the id)."""
        remaining = set(partitions)
        attempt = 0
        while remaining:
            if not still_wanted():
                raise asyncio.CancelledError
            by_leader: dict[int, tuple[object, list[tuple[str, int]]]] = {}
            for topic, index in list(remaining):
                info = self.worker.control.topic(topic)
                if info is None or not info.has_partition(index):
                    remaining.discard((topic, index))  # gone: nothing to mark
                    continue
                leader = self.worker.partition_leader(info, index, self.security.listener)
                if leader is None:
                    continue  # no leader now: next round
                by_leader.setdefault(leader.node_id, (leader, []))[1].append((topic, index))
            results = await asyncio.gather(*[
                self._send(leader, parts, producer_id, producer_epoch, commit,
                           coordinator_epoch)
                for leader, parts in by_leader.values()])
            for done in results:
                remaining -= done
            if remaining:
                await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1

    async def _send(self, leader, partitions, producer_id, producer_epoch, commit,
                    coordinator_epoch) -> set[tuple[str, int]]:
        """The partitions of ``partitions`` whose marker this leader wrote."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, index in partitions:
            by_topic[topic].append(index)
        request = write_txn_markers.Request(markers=[write_txn_markers.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            topics=[write_txn_markers.WritableTxnMarkerTopic(name=t, partition_indexes=p)
                    for t, p in by_topic.items()],
            coordinator_epoch=coordinator_epoch)])
        async with self.locks[leader.node_id]:
            try:
                link = self.links.get(leader.node_id)
                if link is None:
                    link = await ReplicaLink.open(leader.host, leader.port, leader.node_id,
                                                  timeout_s=5, security=self.security)
                    self.links[leader.node_id] = link
                answer = await link.ask(write_txn_markers.SPEC.key, VERSION, request,
                                        timeout_s=30)
            except Exception as exc:  # unreachable, closed (an unknown API), timed out
                first = leader.node_id not in self.failing
                self.failing.add(leader.node_id)  # logged once, then retried quietly
                log.log(logging.WARNING if first else logging.DEBUG,
                        "markers for producer %d to node %d not delivered yet (retried): %r",
                        producer_id, leader.node_id, exc)
                dropped = self.links.pop(leader.node_id, None)
                if dropped is not None:
                    dropped.abort()
                return set()
        self.sent += 1
        self.failing.discard(leader.node_id)
        done = set()
        for marker in answer.markers:
            for topic in marker.topics:
                for result in topic.partitions:
                    code = ErrorCode(result.error_code)
                    if code == ErrorCode.NONE:
                        done.add((topic.name, result.partition_index))
                    elif code == ErrorCode.TRANSACTION_COORDINATOR_FENCED:
                        raise CoordinatorFenced(f"{topic.name}-{result.partition_index}")
                    elif code == ErrorCode.UNSUPPORTED_VERSION and \
                            leader.node_id not in self.unserved:
                        self.unserved.add(leader.node_id)  # logged once: retried quietly
                        log.warning("node %d does not serve WriteTxnMarkers: markers are "
                                    "retried", leader.node_id)
        if done:
            self.unserved.discard(leader.node_id)
        return done

    def close(self) -> None:
        for link in self.links.values():
            link.abort()
        self.links.clear()
