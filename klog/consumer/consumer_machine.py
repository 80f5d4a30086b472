"""The consumer's protocol state machine: positions in, Fetch and ListOffsets requests out,
answers in, records out. Sans-IO: no sockets, no threads, no clock (``now_ms`` is passed).

Both I/O flavours drive the same object: :meth:`poll` returns the requests to send now
(Metadata, ListOffsets for resets and lookups, at most one live Fetch per node),
:meth:`on_response` / :meth:`on_failure` take the answers, :meth:`take_chunk` /
:meth:`take_records` hand out records (decoding on demand; :meth:`take_columns` hands them
out as columns), and :meth:`raise_pending` raises an error an answer left for the
application. It composes the pieces: `Assignment`
(positions), `Lookups` (ListOffsets), `Validations` (positions checked after a leader change,
KIP-320), `Fetcher` (the data path), `ClusterMetadata`.

With a ``group_id`` it also drives a `GroupProtocol` (coordinator, membership, commits):
the group's requests go out with the others, its answers are routed to it, and the group sets
the assignment through :meth:`_apply_group_assignment`. Partitions assigned while there is a
group start at their committed offsets (``COMMITTED``), as Kafka's consumer does.
"""

from __future__ import annotations

from klog.config import ConsumerConfig
from klog.consumer.fetcher import Fetcher
from klog.consumer.group import GROUP_APIS, GroupProtocol
from klog.consumer.offsets import Lookups, OffsetLookup
from klog.consumer.positions import COMMITTED, EARLIEST, LATEST, RESETS, Assignment
from klog.consumer.validation import Validations
from klog.errors import KlogError, NoOffsetForPartitionError
from klog.metadata import NO_LEADER, ClusterMetadata
from klog.outgoing import Outgoing
from klog.protocol.apis import list_offsets, metadata, offset_for_leader_epoch
from klog.protocol.records_columns import RecordColumns
from klog.types import ConsumerRecord, TopicPartition

__all__ = ["EARLIEST", "LATEST", "ConsumerProtocol"]

IDLE_POLL_MS = 1000


class ConsumerProtocol:
    def __init__(self, config: ConsumerConfig):
        self.config = config
        self.cluster = ClusterMetadata(max_age_ms=config.metadata_max_age_ms,
                                       retry_backoff_ms=config.retry_backoff_ms)
        self.assignment = Assignment(RESETS[config.auto_offset_reset])
        self._errors: list[KlogError] = []
        self._backoff: dict[int, int] = {}  # node -> left alone until (ms)
        self._lookups = Lookups(self.cluster, self.assignment, config.isolation, self._errors)
        self._fetcher = Fetcher(config, self.cluster, self.assignment, self._errors,
                                self._backoff)
        self._validations = Validations(self.cluster, self.assignment, self._errors)
        self.group: GroupProtocol | None = None
        if config.group_id is not None:
            self.group = GroupProtocol(config, self.cluster, self.assignment,
                                       self._apply_group_assignment, self._errors)

    # the application's side ---------------------------------------------------------------

    def assign(self, partitions) -> None:
        self.assignment.assign(partitions, reset=COMMITTED if self.group else None)
        self._fetcher.drop_unassigned()
        self.cluster.want(self.assignment.topics())

    def _apply_group_assignment(self, partitions: frozenset[TopicPartition]) -> None:
        self.assign(sorted(partitions))

    def address_of(self, node: int) -> tuple[str, int] | None:
        """Where a node listens: the group coordinator's own answer first (it may come
        before any metadata), then the metadata."""
        group = self.group
        if group is not None and node == group.coordinator.node:
            return group.coordinator.address
        return self.cluster.address_of(node)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.assignment.seek(tp, offset)

    def reset(self, tps, where: int) -> None:
        """Look the position up again: EARLIEST, LATEST (seek_to_beginning/end)."""
        for tp in tps:
            self.assignment.request_reset(TopicPartition(*tp), where)

    def position(self, tp: TopicPartition) -> int | None:
        """The position, or None while it is being looked up (raises for reset "none")."""
        state = self.assignment.state(tp)
        if state.position is None and state.reset is None:
            raise NoOffsetForPartitionError(
                f"{tp.topic}[{tp.partition}] has no position and auto_offset_reset='none'")
        return state.position

    def lookup(self, wanted: dict[TopicPartition, int]) -> OffsetLookup:
        """Start a ListOffsets lookup; poll() sends it; ``lookup.done`` when answered."""
        return self._lookups.add(wanted)

    def raise_pending(self) -> None:
        """Raise the first error an answer left for the application, or the lack of a
        position where auto_offset_reset="none" forbids looking one up."""
        if self._errors:
            raise self._errors.pop(0)
        missing = self.assignment.without_position()
        if missing:
            raise NoOffsetForPartitionError(
                "no position for " + ", ".join(f"{t}[{p}]" for t, p in missing) +
                " and auto_offset_reset='none': seek() first")

    def take_chunk(self) -> tuple[TopicPartition, list[ConsumerRecord]] | None:
        """The records of the oldest buffered fetch; see `Fetcher.take_chunk`."""
        return self._fetcher.take_chunk()

    def take_columns(self) -> dict[TopicPartition, RecordColumns]:
        """Every buffered fetch as columns per partition; see `Fetcher.take_columns`."""
        return self._fetcher.take_columns()

    def take_records(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max_records`` records grouped by partition; see `Fetcher.take_records`."""
        return self._fetcher.take_records(max_records)

    # the I/O side -------------------------------------------------------------------------

    def poll(self, now_ms: int) -> list[Outgoing]:
        group = self.group
        out: list[Outgoing] = [] if group is None else group.poll(now_ms)  # may want metadata
        all_topics = group is not None and group.subscribed.wants_all_topics
        due = self.cluster.refresh_due_ms(now_ms)
        if due is not None and due <= now_ms and (self.cluster.wanted or all_topics):
            body = self.cluster.build_request(now_ms)
            if all_topics:
                body.topics = None  # every topic: a pattern is matched against them all
            out.append(Outgoing(None, metadata, body))
        self._lookups.start_resets()
        out.extend(self._lookups.requests(now_ms, self._node_ready))
        out.extend(self._validations.requests(now_ms, self._node_ready))  # before fetching
        out.extend(self._fetcher.requests(now_ms, self._node_ready))
        return out

    def next_poll_ms(self, now_ms: int) -> int:
        candidates = [now_ms + IDLE_POLL_MS]
        due = self.cluster.refresh_due_ms(now_ms)
        group = self.group
        if due is not None and (self.cluster.wanted or group and group.subscribed.active):
            candidates.append(due)
        if group is not None:
            group_due = group.next_poll_ms(now_ms)
            if group_due is not None:
                candidates.append(group_due)
        candidates.extend(t for t in self._backoff.values() if t > now_ms)
        return max(now_ms, min(candidates))

    def _node_ready(self, node: int, now_ms: int) -> bool:
        return node != NO_LEADER and self._backoff.get(node, 0) <= now_ms

    def on_response(self, request: Outgoing, response, now_ms: int) -> None:
        if request.api is metadata:
            self.cluster.update(response, now_ms)
            if self.group is not None:
                self.group.on_metadata(response)
        elif request.api in GROUP_APIS:
            self.group.on_response(request, response, now_ms)  # type: ignore[union-attr]
        elif request.api is list_offsets:
            if self._lookups.on_response(request, response):
                self._backoff[request.node] = now_ms + self.config.retry_backoff_ms
        elif request.api is offset_for_leader_epoch:
            if self._validations.on_response(request, response):
                self._backoff[request.node] = now_ms + self.config.retry_backoff_ms
        else:
            self._fetcher.on_response(request, response, now_ms)

    def on_failure(self, request: Outgoing, error: KlogError, now_ms: int) -> None:
        """The request was lost (connection closed, timed out, could not connect)."""
        if request.node is not None:
            self._backoff[request.node] = now_ms + self.config.retry_backoff_ms
        self.cluster.mark_stale()
        if request.api is metadata:
            self.cluster.failed(now_ms, str(error))
        elif request.api in GROUP_APIS:
            self.group.on_failure(request, error, now_ms)  # type: ignore[union-attr]
        elif request.api is list_offsets:
            self._lookups.on_failure(request)
        elif request.api is offset_for_leader_epoch:
            self._validations.on_failure(request)
        else:
            self._fetcher.on_failure(request)
