"""Committed offsets: OffsetCommit and OffsetFetch with the group's coordinator. Pure.

A :class:`PendingCommit` is one commit; it is sent with the member's generation and id (or
generation -1 and no member id, the "simple" commit of an assign()-only consumer) as they
are at send time. A subscribed consumer outside a stable generation cannot commit (Java's
rule): the commit fails at once with CommitFailedError. Answers, as Java's handlers treat
them:

- the coordinator moved (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT) or
  is loading: retried, for a synchronous commit (``retry``), until the caller gives up;
- REBALANCE_IN_PROGRESS: the member must rejoin, the commit fails;
- UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION: the membership is gone, the commit fails;
- anything else fails the commit.

A :class:`CommittedLookup` is one OffsetFetch question: the application's ``committed()``, or
the start positions of newly assigned partitions (tagged with the partition generations it
was made for, so a seek in between wins, as in `klog.consumer.offsets`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from klog.consumer.group.coordinator import MOVED, CoordinatorLink
from klog.consumer.group.events import CommitDone
from klog.consumer.positions import Assignment
from klog.errors import CommitFailedError, KlogError, error_for
from klog.outgoing import Outgoing
from klog.protocol.apis import offset_commit, offset_fetch
from klog.protocol.error_codes import ErrorCode
from klog.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

RETRY = MOVED | {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT,
                 ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNSTABLE_OFFSET_COMMIT}
FENCED = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION})


class PendingCommit:
    __slots__ = ("offsets", "retry", "callback", "done", "error", "sent", "retry_at_ms")

    def __init__(self, offsets: dict[TopicPartition, OffsetAndMetadata], retry: bool,
                 callback: Callable | None):
        self.offsets = offsets
        self.retry = retry  # synchronous: retriable errors are retried
        self.callback = callback  # asynchronous: callback(offsets, error | None)
        self.done = False
        self.error: KlogError | None = None
        self.sent = False
        self.retry_at_ms = 0


class CommittedLookup:
    __slots__ = ("partitions", "results", "error", "sent", "retry_at_ms", "generations")

    def __init__(self, partitions, generations: dict[TopicPartition, int] | None = None):
        self.partitions = [TopicPartition(*tp) for tp in partitions]
        self.results: dict[TopicPartition, OffsetAndMetadata | None] = {}
        self.error: KlogError | None = None
        self.sent = False
        self.retry_at_ms = 0
        self.generations = generations  # None: the application's lookup

    @property
    def done(self) -> bool:
        return self.error is not None or len(self.results) == len(set(self.partitions))


class Commits:
    def __init__(self, group_id: str, retry_backoff_ms: int, assignment: Assignment,
                 coordinator: CoordinatorLink, membership: Any, events: Any,
                 errors: list[KlogError]):
        self.group_id = group_id
        self.retry_backoff_ms = retry_backoff_ms
        self.assignment = assignment
        self.coordinator = coordinator
        self.membership = membership  # identity(), request_rejoin(), reset_generation()
        self.events = events
        self.errors = errors  # shared with the protocol object: raised by poll
        self.committed: dict[TopicPartition, int] = {}  # what this consumer last committed
        # read_committed (KIP-447): OffsetFetch v7 asks for stable offsets only; offsets a
        # transaction still holds pending answer UNSTABLE_OFFSET_COMMIT, retried until it ends
        self.require_stable = False
        self._commits: list[PendingCommit] = []
        self._lookups: list[CommittedLookup] = []

    # the application's side ---------------------------------------------------------------

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata], *, retry: bool,
               callback: Callable | None = None) -> PendingCommit:
        pending = PendingCommit(offsets, retry, callback)
        if not offsets:
            self._finish(pending, None)
        else:
            self._commits.append(pending)
        return pending

    def lookup(self, partitions) -> CommittedLookup:
        found = CommittedLookup(partitions)
        self._lookups.append(found)
        return found

    def cancel(self, item: PendingCommit | CommittedLookup) -> None:
        """The caller stopped waiting (timeout): forget it (an answer is ignored)."""
        for queue in (self._commits, self._lookups):
            if item in queue:
                queue.remove(item)

    @property
    def busy(self) -> bool:
        return bool(self._commits or self._lookups)

    # requests -----------------------------------------------------------------------------

    def start_position_lookup(self) -> None:
        """An OffsetFetch for newly assigned partitions without one under way."""
        states = self.assignment.states
        asked = {tp for lookup in self._lookups if lookup.generations is not None
                 for tp, generation in lookup.generations.items()
                 if tp in states and states[tp].generation == generation}
        wanted = [tp for tp in self.assignment.needing_committed() if tp not in asked]
        if wanted:
            self._lookups.append(CommittedLookup(
                wanted, generations={tp: states[tp].generation for tp in wanted}))

    def requests(self, now_ms: int) -> list[Outgoing]:
        node = self.coordinator.node
        if node is None:
            return []
        out = []
        for pending in list(self._commits):
            if not pending.sent and pending.retry_at_ms <= now_ms:
                request = self._commit_request(pending, node, now_ms)
                if request is not None:
                    out.append(request)
        for lookup in self._lookups:
            if not lookup.sent and lookup.retry_at_ms <= now_ms:
                lookup.sent = True
                out.append(Outgoing(node, offset_fetch, _fetch_body(
                    self.group_id, lookup, self.require_stable), context=lookup))
        return out

    def next_poll_ms(self) -> int | None:
        times = [x.retry_at_ms for x in (*self._commits, *self._lookups) if not x.sent]
        return min(times) if times else None

    def _commit_request(self, pending: PendingCommit, node: int, now_ms: int):
        identity = self.membership.identity()
        if isinstance(identity, KlogError):
            self._finish(pending, identity)
            return None
        generation, member_id, instance_id = identity
        pending.sent = True
        by_topic: dict[str, list] = {}
        for tp, meta in sorted(pending.offsets.items()):
            by_topic.setdefault(tp.topic, []).append(offset_commit.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=meta.offset,
                committed_leader_epoch=meta.leader_epoch, committed_metadata=meta.metadata))
        body = offset_commit.Request(
            group_id=self.group_id, generation_id_or_member_epoch=generation,
            member_id=member_id, group_instance_id=instance_id, retention_time_ms=-1,
            topics=[offset_commit.OffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()])
        return Outgoing(node, offset_commit, body, context=(pending, generation))

    # answers ------------------------------------------------------------------------------

    def on_response(self, request: Outgoing, response, now_ms: int) -> None:
        if request.api is offset_commit:
            self._on_commit(request.context, response, now_ms)
        else:
            self._on_fetch(request.context, response, now_ms)

    def on_failure(self, request: Outgoing, now_ms: int, reason: str) -> None:
        self.coordinator.lost(now_ms, reason)
        if request.api is offset_commit:
            pending, _ = request.context
            self._retry_or_fail(pending, ErrorCode.COORDINATOR_NOT_AVAILABLE, now_ms, reason)
        else:
            self._retry(request.context, now_ms)

    def _on_commit(self, context, response, now_ms: int) -> None:
        pending, generation = context
        worst = ErrorCode.NONE
        for topic in response.topics:
            for part in topic.partitions:
                code = ErrorCode(part.error_code)
                tp = TopicPartition(topic.name, part.partition_index)
                if code == ErrorCode.NONE and tp in pending.offsets:
                    self.committed[tp] = pending.offsets[tp].offset
                elif code != ErrorCode.NONE and worst == ErrorCode.NONE:
                    worst = code
        if worst == ErrorCode.NONE:
            self._finish(pending, None)
            return
        if worst in MOVED:
            self.coordinator.lost(now_ms, f"OffsetCommit: {worst.name}")
        elif worst == ErrorCode.REBALANCE_IN_PROGRESS:
            self.membership.request_rejoin("a commit met a rebalance")
        elif worst in FENCED:
            self.membership.reset_generation(f"OffsetCommit: {worst.name}", generation)
        self._retry_or_fail(pending, worst, now_ms)

    def _retry_or_fail(self, pending: PendingCommit, code: ErrorCode, now_ms: int,
                       reason: str | None = None) -> None:
        if pending.done or pending not in self._commits:
            return
        if code in RETRY and pending.retry:
            log.info("OffsetCommit for group %r: %s; retrying in %d ms", self.group_id,
                     reason or code.name, self.retry_backoff_ms)
            pending.sent = False
            pending.retry_at_ms = now_ms + self.retry_backoff_ms
            return
        if code in FENCED or code == ErrorCode.REBALANCE_IN_PROGRESS:
            error: KlogError = CommitFailedError(
                f"the group rebalanced ({code.name}): the partitions may have moved to another "
                "member; poll() to rejoin, then commit again", code)
        elif code in RETRY:
            error = error_for(code, reason, broker=self.group_id)
        else:
            error = CommitFailedError(f"OffsetCommit for group {self.group_id!r} refused: "
                                      f"{code.name}", code)
        self._finish(pending, error)

    def _finish(self, pending: PendingCommit, error: KlogError | None) -> None:
        if error is not None:
            log.warning("commit of %d offset(s) for group %r failed: %s", len(pending.offsets),
                        self.group_id, error)
        pending.done, pending.error = True, error
        if pending in self._commits:
            self._commits.remove(pending)
        if pending.callback is not None:
            self.events.append(CommitDone(pending))

    def _on_fetch(self, lookup: CommittedLookup, response, now_ms: int) -> None:
        if lookup not in self._lookups:
            return  # cancelled
        code = ErrorCode(response.error_code)
        if code == ErrorCode.NONE:
            code = self._absorb_fetch(lookup, response)
        if code in MOVED:
            self.coordinator.lost(now_ms, f"OffsetFetch: {code.name}")
        if code in RETRY:
            self._retry(lookup, now_ms)
            return
        if code != ErrorCode.NONE:
            lookup.error = error_for(code, f"OffsetFetch for group {self.group_id!r}")
        else:
            for tp in lookup.partitions:  # not in the answer: nothing committed
                lookup.results.setdefault(tp, None)
        self._lookups.remove(lookup)
        if lookup.generations is not None:
            self._apply_positions(lookup)

    @staticmethod
    def _absorb_fetch(lookup: CommittedLookup, response) -> ErrorCode:
        """Per-partition answers into ``lookup.results``; the first error, if any (an unknown
        partition is not one: it has nothing committed)."""
        wanted = set(lookup.partitions)
        for topic in response.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition_index)
                code = ErrorCode(part.error_code)
                if code not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    return code
                if tp in wanted:
                    offset = part.committed_offset if code == ErrorCode.NONE else -1
                    lookup.results[tp] = None if offset < 0 else OffsetAndMetadata(
                        offset, part.metadata or "", part.committed_leader_epoch)
        return ErrorCode.NONE

    def _retry(self, lookup: CommittedLookup, now_ms: int) -> None:
        lookup.sent = False
        lookup.results.clear()
        lookup.retry_at_ms = now_ms + self.retry_backoff_ms

    def _apply_positions(self, lookup: CommittedLookup) -> None:
        if lookup.error is not None:
            self.errors.append(lookup.error)
            return  # still COMMITTED: asked again at the next poll
        states = self.assignment.states
        for tp, generation in lookup.generations.items():
            state = states.get(tp)
            if state is None or state.generation != generation:
                continue  # a seek or reassignment since: it decides
            found = lookup.results.get(tp)
            if found is None:
                self.assignment.no_commit(tp)
            else:
                self.assignment.resolved(tp, found.offset)


def _fetch_body(group_id: str, lookup: CommittedLookup, require_stable: bool = False):
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(set(lookup.partitions)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return offset_fetch.Request(group_id=group_id, require_stable=require_stable, topics=[
        offset_fetch.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
        for t, ps in by_topic.items()])
