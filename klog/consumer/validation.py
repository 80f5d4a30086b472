"""Validating fetch positions after a leader change (KIP-320), as Kafka's consumer does. Pure.

A position was reached by reading a log; after an election, the new leader's log may differ
from it past some offset (only after an unclean election, or a bug: a clean one keeps every
record a consumer could have read). Before fetching again from a partition whose leader
epoch rose since the last fetch, the consumer asks the leader where the epoch of the last
batch it fetched ends in the leader's log (OffsetForLeaderEpoch, with `current_leader_epoch`).

- The end is at or past the fetch position: the position stands.
- The end is below it: the log was truncated under the consumer. With a reset policy the
  position moves back to that end (the first offset known to diverge), with a warning: the
  records between were read but no longer exist. With ``auto_offset_reset="none"`` poll
  raises LogTruncationError, naming where the logs part.
- The leader knows no such epoch (-1): nothing can be compared; the position is reset by
  the policy (or LogTruncationError without one).

Fencing errors (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, ...) are
retried after a metadata refresh; the partition is not fetched meanwhile. A position set by
seek, a reset or a committed offset carries no epoch and is not validated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from klog.consumer.positions import Assignment
from klog.errors import KlogError, LogTruncationError, error_for
from klog.metadata import NO_LEADER, ClusterMetadata
from klog.outgoing import Outgoing
from klog.protocol.apis import offset_for_leader_epoch as api
from klog.protocol.error_codes import ErrorCode
from klog.types import TopicPartition

log = logging.getLogger(__name__)

CONSUMER_REPLICA_ID = -1


class Validations:
    def __init__(self, cluster: ClusterMetadata, assignment: Assignment,
                 errors: list[KlogError]):
        self.cluster = cluster
        self.assignment = assignment
        self.errors = errors  # shared with the protocol object: raised by poll
        self._sent: set[TopicPartition] = set()

    def requests(self, now_ms: int, node_ready: Callable[[int, int], bool]) -> list[Outgoing]:
        by_node: dict[int, list[TopicPartition]] = {}
        for tp, state in self.assignment.states.items():
            if tp in self._sent or not self._due(tp, state):
                continue
            state.validating = True
            node = self.cluster.leader_of(tp.topic, tp.partition)
            if node == NO_LEADER:
                self.cluster.want((tp.topic,))
                self.cluster.mark_stale()
            elif node_ready(node, now_ms):
                by_node.setdefault(node, []).append(tp)
        return [self._request(node, tps) for node, tps in by_node.items()]

    def _due(self, tp: TopicPartition, state) -> bool:
        """Validating already, or a leader epoch above the one last fetched in, with a
        position whose epoch is known (and no fetch in flight: its answer comes first)."""
        if state.validating:
            return True
        if state.fetching or state.fetch_offset is None or state.fetch_epoch < 0:
            return False
        current = self.cluster.leader_epoch_of(tp.topic, tp.partition)
        return 0 <= state.leader_epoch < current

    def _request(self, node: int, tps: list[TopicPartition]) -> Outgoing:
        states = self.assignment.states
        by_topic: dict[str, list] = {}
        context = {}
        for tp in tps:
            self._sent.add(tp)
            state = states[tp]
            current = self.cluster.leader_epoch_of(tp.topic, tp.partition)
            context[tp] = (state.generation, state.fetch_offset, current)
            by_topic.setdefault(tp.topic, []).append(api.OffsetForLeaderPartition(
                partition=tp.partition, current_leader_epoch=current,
                leader_epoch=state.fetch_epoch))
        body = api.Request(replica_id=CONSUMER_REPLICA_ID, topics=[
            api.OffsetForLeaderTopic(topic=t, partitions=p) for t, p in by_topic.items()])
        return Outgoing(node, api, body, context=context)

    def on_response(self, request: Outgoing, response) -> bool:
        """Take an answer; True when some partitions must be asked again later."""
        retry = False
        broker = self.cluster.describe(request.node)
        for topic in response.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, part.partition)
                asked = request.context.get(tp)
                if asked is None:
                    continue
                self._sent.discard(tp)
                state = self.assignment.states.get(tp)
                if state is None or state.generation != asked[0] or not state.validating:
                    continue  # moved meanwhile (a seek, a reset, a reassignment)
                retry |= self._absorb(tp, state, asked, part, broker)
        return retry

    def on_failure(self, request: Outgoing) -> None:
        self._sent.difference_update(request.context)

    def _absorb(self, tp, state, asked, part, broker: str) -> bool:
        _, position, current = asked
        code = ErrorCode(part.error_code)
        if code != ErrorCode.NONE:
            if code.retriable:
                self.cluster.mark_stale()
                return True
            self._done(state, current)
            self.errors.append(error_for(code, topic=tp.topic, partition=tp.partition,
                                         broker=broker))
            return False
        if part.end_offset < 0 or part.leader_epoch < 0:
            self._truncated(tp, state, current, position, -1, broker)
        elif part.end_offset < position:
            self._truncated(tp, state, current, position, part.end_offset, broker)
        else:
            self._done(state, current)
        return False

    def _truncated(self, tp, state, current: int, position: int, end: int,
                   broker: str) -> None:
        reset = self.assignment.default_reset
        what = (f"{tp.topic}[{tp.partition}]: the log of leader {broker} (epoch {current}) "
                + (f"diverges from ours at {end}, below our fetch position {position}"
                   if end >= 0 else f"knows no epoch {state.fetch_epoch} of our position "
                   f"{position}"))
        if reset is None:
            self._done(state, current)
            self.errors.append(LogTruncationError(
                f"{what}, and auto_offset_reset='none': seek() to go on", topic=tp.topic,
                partition=tp.partition, divergent_offset=end))
        elif end >= 0:
            log.warning("%s: records from %d on were read but are gone; resuming at %d",
                        what, end, end)
            self.assignment.seek(tp, end)
        else:
            log.warning("%s: resetting the position by auto_offset_reset", what)
            self.assignment.request_reset(tp, reset)

    @staticmethod
    def _done(state, current: int) -> None:
        state.validating = False
        state.leader_epoch = max(state.leader_epoch, current)
