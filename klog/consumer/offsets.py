"""ListOffsets lookups: earliest, latest, or the first offset at or after a timestamp. Pure.

One :class:`OffsetLookup` per question ("where does each of these partitions start?", "the
first offsets after 10:00"); :class:`Lookups` sends one ListOffsets per leader for the
partitions still unanswered and fills the lookups from the answers. Leadership errors are
retried after a metadata refresh; anything else ends the lookup with a typed error. The
consumer's own position resets (auto_offset_reset, seek_to_beginning/end) are lookups too,
tagged with the partition generations they were made for, so a seek in between voids them.
Each partition carries its leader epoch (KIP-320): a leader that has moved on answers
FENCED_LEADER_EPOCH, one that has not heard of the election UNKNOWN_LEADER_EPOCH, a leader
just elected whose high watermark still lags OFFSET_NOT_AVAILABLE; all are retried.
"""

from __future__ import annotations

from collections.abc import Callable

from klog.consumer.positions import Assignment
from klog.errors import KlogError, error_for
from klog.metadata import NO_LEADER, ClusterMetadata
from klog.outgoing import Outgoing
from klog.protocol.apis import list_offsets
from klog.protocol.error_codes import ErrorCode
from klog.types import TopicPartition


class OffsetLookup:
    """``wanted``: partition -> timestamp ms, or EARLIEST (-2) / LATEST (-1).
    ``results``: partition -> (offset, timestamp), or None when no record is that recent."""

    def __init__(self, wanted: dict[TopicPartition, int], *, generations=None):
        self.wanted = dict(wanted)
        self.results: dict[TopicPartition, tuple[int, int] | None] = {}
        self.error: KlogError | None = None
        self.sent: set[TopicPartition] = set()
        self.generations = generations or {}  # for resets: the partition state's generation

    @property
    def done(self) -> bool:
        return self.error is not None or len(self.results) == len(self.wanted)

    def unsent(self) -> list[TopicPartition]:
        return [tp for tp in self.wanted if tp not in self.results and tp not in self.sent]

    def request(self, partitions: list[TopicPartition], isolation_level: int,
                epoch_of: Callable[[str, int], int] = lambda topic, partition: -1):
        """The ListOffsets body asking for ``partitions`` (all led by one node), each with
        its leader epoch as ``epoch_of`` knows it (KIP-320; -1: unknown)."""
        by_topic: dict[str, list] = {}
        for tp in partitions:
            self.sent.add(tp)
            by_topic.setdefault(tp.topic, []).append(list_offsets.ListOffsetsPartition(
                partition_index=tp.partition,
                current_leader_epoch=epoch_of(tp.topic, tp.partition),
                timestamp=self.wanted[tp]))
        return list_offsets.Request(replica_id=-1, isolation_level=isolation_level, topics=[
            list_offsets.ListOffsetsTopic(name=name, partitions=parts)
            for name, parts in by_topic.items()])

    def absorb(self, response, broker: str) -> bool:
        """Take an answer; returns True when metadata should be refreshed (a retry)."""
        stale = False
        for topic in response.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition_index)
                if tp not in self.wanted:
                    continue
                self.sent.discard(tp)
                code = ErrorCode(part.error_code)
                if code == ErrorCode.NONE:
                    found = part.offset >= 0
                    self.results[tp] = (part.offset, part.timestamp) if found else None
                elif code.retriable:
                    stale = True
                else:
                    self.error = error_for(code, topic=tp.topic, partition=tp.partition,
                                           broker=broker)
        return stale

    def lost(self, partitions: list[TopicPartition]) -> None:
        """The request went unanswered: ask again."""
        self.sent.difference_update(partitions)


class Lookups:
    """The lookups in progress: the application's and the position resets."""

    def __init__(self, cluster: ClusterMetadata, assignment: Assignment, isolation: int,
                 errors: list[KlogError]):
        self.cluster = cluster
        self.assignment = assignment
        self.isolation = isolation
        self.errors = errors  # shared with the protocol object: raised by poll
        self._lookups: list[OffsetLookup] = []

    def add(self, wanted: dict[TopicPartition, int]) -> OffsetLookup:
        found = OffsetLookup({TopicPartition(*tp): ts for tp, ts in wanted.items()})
        self.cluster.want({tp.topic for tp in found.wanted})
        self._lookups.append(found)
        return found

    def start_resets(self) -> None:
        """A lookup for every partition that needs a position and has none under way."""
        states = self.assignment.states
        for lookup in self._lookups:  # a seek made some resets moot: do not ask for those
            for tp, generation in lookup.generations.items():
                if tp not in lookup.results and tp not in lookup.sent and (
                        tp not in states or states[tp].generation != generation):
                    lookup.results[tp] = None
        self._finish()
        pending = {tp for lookup in self._lookups
                   for tp, generation in lookup.generations.items()
                   if tp not in lookup.results and tp in states
                   and states[tp].generation == generation}
        wanted = {tp: where for tp, where in self.assignment.needing_reset()
                  if tp not in pending}
        if wanted:
            generations = {tp: states[tp].generation for tp in wanted}
            self._lookups.append(OffsetLookup(wanted, generations=generations))

    def requests(self, now_ms: int, node_ready: Callable[[int, int], bool]) -> list[Outgoing]:
        out = []
        for lookup in self._lookups:
            by_node: dict[int, list[TopicPartition]] = {}
            for tp in lookup.unsent():
                node = self.cluster.leader_of(tp.topic, tp.partition)
                if node == NO_LEADER:
                    self.cluster.want((tp.topic,))
                    self.cluster.mark_stale()
                elif node_ready(node, now_ms):
                    by_node.setdefault(node, []).append(tp)
            for node, tps in by_node.items():
                body = lookup.request(tps, self.isolation, self.cluster.leader_epoch_of)
                out.append(Outgoing(node, list_offsets, body, context=(lookup, tps)))
        return out

    def on_response(self, request: Outgoing, response) -> bool:
        """Take an answer; True when some partitions must be asked again (after a metadata
        refresh, and not at once: the caller leaves the node alone a while)."""
        lookup, _ = request.context
        stale = lookup.absorb(response, self.cluster.describe(request.node))
        if stale:
            self.cluster.mark_stale()
        self._finish()
        return stale

    def on_failure(self, request: Outgoing) -> None:
        lookup, tps = request.context
        lookup.lost(tps)

    def _finish(self) -> None:
        for lookup in [x for x in self._lookups if x.done]:
            self._lookups.remove(lookup)
            if not lookup.generations:
                continue  # the application's own lookup: it reads the results itself
            if lookup.error is not None:
                self.errors.append(lookup.error)
            for tp, found in lookup.results.items():
                state = self.assignment.states.get(tp)
                if state is None or state.generation != lookup.generations[tp]:
                    continue
                self.assignment.resolved(tp, found[0] if found else state.high_watermark)
