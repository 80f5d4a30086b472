"""Fetch planning and Fetch answers: the consumer's data path. Pure (no I/O, no clock).

At most one live Fetch per node carries every fetchable partition the node leads; an answer
is only *scanned* when it arrives (batch headers give the next fetch offset), queued as a
:class:`CompletedFetch`, and decoded when the application takes records, so the next Fetch
is already on its way while the application works (pipelining). A partition holds at most
two undelivered fetches. Stale answers (a seek or reassignment since the request) are
dropped by comparing the partition's generation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from itertools import groupby

from klog.config import ConsumerConfig
from klog.consumer.positions import Assignment
from klog.consumer.records import (
    CompletedFetch,
    decode,
    decode_columns,
    drop_aborted,
    next_fetch_position,
)
from klog.errors import KlogError, error_for
from klog.metadata import NO_LEADER, ClusterMetadata, read_replica_for
from klog.outgoing import Outgoing
from klog.protocol.apis import fetch
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records_columns import RecordColumns, append_records
from klog.types import ConsumerRecord, TopicPartition

FETCH_CHANNELS = ("fetch", "fetch-spare")
# errors whose answer may carry KIP-951's current leader
_HINTED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})


class Fetcher:
    def __init__(self, config: ConsumerConfig, cluster: ClusterMetadata,
                 assignment: Assignment, errors: list[KlogError], backoff: dict[int, int]):
        self.config = config
        self.cluster = cluster
        self.assignment = assignment
        self.errors = errors  # shared with the protocol object: raised by poll
        self.backoff = backoff  # node -> time before which it is left alone
        self._fetches: dict[tuple[int, str], dict] = {}  # (node, channel) -> fetch in flight
        self._completed: deque[CompletedFetch] = deque()
        self._last_next_offset = -1
        self.read_salt = id(self) >> 4  # differs between consumers: their reads spread

    # requests -----------------------------------------------------------------------------

    def requests(self, now_ms: int, node_ready: Callable[[int, int], bool]) -> list[Outgoing]:
        by_node: dict[int, list[tuple[TopicPartition, int]]] = {}
        for tp, state in self.assignment.states.items():
            if not state.fetchable:
                continue
            node = read_replica_for(self.cluster, tp.topic, tp.partition, self.read_salt)
            if node == NO_LEADER:
                self.cluster.want((tp.topic,))
                self.cluster.mark_stale()
            elif node_ready(node, now_ms) and self._channel(node) is not None:
                by_node.setdefault(node, []).append((tp, state.fetch_offset))
        return [self._request(node, wanted) for node, wanted in by_node.items()]

    def _request(self, node: int, wanted: list[tuple[TopicPartition, int]]) -> Outgoing:
        config = self.config
        states = self.assignment.states
        topics: dict[str, list] = {}
        for tp, offset in wanted:
            states[tp].fetching = True
            epoch = self.cluster.leader_epoch_of(tp.topic, tp.partition)
            states[tp].leader_epoch = max(states[tp].leader_epoch, epoch)
            topics.setdefault(tp.topic, []).append(fetch.FetchPartition(
                partition=tp.partition, current_leader_epoch=epoch, fetch_offset=offset,
                log_start_offset=-1, partition_max_bytes=config.max_partition_fetch_bytes))
        body = fetch.Request(
            replica_id=-1, max_wait_ms=config.fetch_max_wait_ms,
            min_bytes=config.fetch_min_bytes, max_bytes=config.fetch_max_bytes,
            isolation_level=config.isolation, session_id=0, session_epoch=-1,
            topics=[fetch.FetchTopic(topic=name, partitions=parts)
                    for name, parts in topics.items()],
            forgotten_topics_data=[], rack_id="")
        context = {tp: (offset, states[tp].generation) for tp, offset in wanted}
        channel = self._channel(node)
        self._fetches[(node, channel)] = context
        return Outgoing(node, fetch, body, context=context, channel=channel)

    def _channel(self, node: int) -> str | None:
        """The connection for the node's next Fetch, or None while a live one is in flight.

        One Fetch per node at a time, as Kafka's consumer does; but when every partition of
        the one in flight has been moved (seek), its answer is worthless and may be a long
        poll of up to fetch_max_wait_ms, so the next Fetch goes out on the spare channel."""
        states = self.assignment.states
        free = None
        for channel in FETCH_CHANNELS:
            context = self._fetches.get((node, channel))
            if context is None:
                free = free or channel
            elif any(tp in states and states[tp].generation == generation
                     for tp, (_, generation) in context.items()):
                return None
        return free

    # answers ------------------------------------------------------------------------------

    def on_response(self, request: Outgoing, response, now_ms: int) -> None:
        self._answered(request)
        broker = self.cluster.describe(request.node)
        if response.error_code:
            self.errors.append(error_for(response.error_code, broker=broker))
        for topic in response.responses:
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, part.partition_index)
                asked = request.context.get(tp)
                state = self.assignment.states.get(tp)
                if asked is None or state is None or state.generation != asked[1]:
                    continue  # not ours any more, or a seek came after the request
                if self._on_partition(tp, state, asked[0], part, broker):
                    self.backoff[request.node] = now_ms + self.config.retry_backoff_ms

    def on_failure(self, request: Outgoing) -> None:
        self._answered(request)

    def _answered(self, request: Outgoing) -> None:
        self._fetches.pop((request.node, request.channel), None)
        for tp, (_, generation) in request.context.items():
            state = self.assignment.states.get(tp)
            if state is not None and state.generation == generation:
                state.fetching = False

    def _on_partition(self, tp, state, offset, part, broker) -> bool:
        """Absorb one partition's answer; True when the node should be left alone a while."""
        code = ErrorCode(part.error_code)
        if code == ErrorCode.NONE:
            state.high_watermark = part.high_watermark
            state.log_start_offset = part.log_start_offset
            data = part.records
            if data:
                data = bytes(data)
                found = next_fetch_position(data)
                following = None if found is None else found[0]
                if part.aborted_transactions and self.config.isolation:
                    data = drop_aborted(data, part.aborted_transactions)
                if following is not None and following > offset:
                    state.fetch_offset, state.fetch_epoch = found
                    state.buffered += 1
                    self._completed.append(CompletedFetch(tp, offset, data, following,
                                                          state.generation))
            return False
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            reset = self.assignment.default_reset
            if reset is not None:
                self.assignment.request_reset(tp, reset)
                return False
            # Kafka's rule without a reset policy: the position stays, every poll raises
            self.errors.append(error_for(
                code, f"offset {offset} (log {part.log_start_offset} to "
                f"{part.high_watermark}) and auto_offset_reset='none'", topic=tp.topic,
                partition=tp.partition, broker=broker))
        elif code.retriable:
            hint = part.current_leader  # KIP-951 (Fetch v12+): where the leader is now
            if not (code in _HINTED and self.cluster.leader_hint(
                    tp.topic, tp.partition, hint.leader_id, hint.leader_epoch)):
                self.cluster.mark_stale()
        else:
            self.errors.append(error_for(code, topic=tp.topic, partition=tp.partition,
                                         broker=broker))
        return True

    # handing records out ------------------------------------------------------------------

    def drop_unassigned(self) -> None:
        states = self.assignment.states
        self._completed = deque(f for f in self._completed if f.tp in states)

    def take_chunk(self) -> tuple[TopicPartition, list[ConsumerRecord]] | None:
        """The records of the oldest buffered fetch (may be empty), its partition's position
        moved past them; None when nothing is buffered."""
        while self._completed:
            completed = self._completed.popleft()
            state = self.assignment.states.get(completed.tp)
            if state is None or state.generation != completed.generation:
                continue  # stale: a seek or reassignment came after it
            state.buffered -= 1
            if isinstance(completed, _Decoded):
                records = completed.records
            else:
                config = self.config
                records = decode(completed, check_crcs=config.check_crcs,
                                 key_deserializer=config.key_deserializer,
                                 value_deserializer=config.value_deserializer)
            state.position = completed.next_offset
            self._last_next_offset = completed.next_offset
            return completed.tp, records
        return None

    def take_columns(self) -> dict[TopicPartition, RecordColumns]:
        """Every buffered fetch decoded into columns, one :class:`RecordColumns` per
        partition (fetches of one partition appended in order), positions moved past them.
        Raw keys and values: the deserializers are not applied."""
        out: dict[TopicPartition, RecordColumns] = {}
        states = self.assignment.states
        while self._completed:
            completed = self._completed.popleft()
            state = states.get(completed.tp)
            if state is None or state.generation != completed.generation:
                continue
            state.buffered -= 1
            columns = out.get(completed.tp)
            if columns is None:
                columns = out[completed.tp] = RecordColumns()
            if isinstance(completed, _Decoded):  # put back by take_records: not the hot path
                for kind, records in groupby(completed.records, type):
                    append_records(columns, list(records), kind.timestamp_type)
            else:
                decode_columns(completed, columns, check_crcs=self.config.check_crcs)
            state.position = completed.next_offset
            self._last_next_offset = completed.next_offset
        return out

    def take_records(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max_records`` records grouped by partition (poll's answer). A chunk
        larger than that is split: its rest goes back to the front of the buffer."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        count = 0
        while count < max_records:
            chunk = self.take_chunk()
            if chunk is None:
                break
            tp, records = chunk
            room = max_records - count
            if len(records) > room:
                self._put_back(tp, records[room:])
                records = records[:room]
            if records:
                out.setdefault(tp, []).extend(records)
                count += len(records)
        return out

    def _put_back(self, tp: TopicPartition, rest: list[ConsumerRecord]) -> None:
        state = self.assignment.states[tp]
        state.position = rest[0].offset
        self._completed.appendleft(_Decoded(tp, rest, self._last_next_offset, state.generation))
        state.buffered += 1


class _Decoded(CompletedFetch):
    """Records already decoded, put back by take_records when poll's max_records split them."""

    __slots__ = ("records",)

    def __init__(self, tp: TopicPartition, records: list[ConsumerRecord], next_offset: int,
                 generation: int):
        super().__init__(tp, records[0].offset, b"", next_offset, generation)
        self.records = records
