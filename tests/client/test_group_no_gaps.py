"""At-least-once across rebalances: no record is skipped when partitions come and go.

Two layers. The sans-IO tests drive the consumer's protocol object by hand through the race
that once skipped a record: a Fetch in flight while a partition is revoked and assigned
again (eager protocol: every rebalance revokes everything, then assigns; a manual
``assign``/``assign`` does the same). Its answer, for the offset after records still
buffered when the revocation dropped them, must not be taken as the new assignment's.

The stress test runs klog consumers in a group on a real two-worker appliance while a
producer writes and members join and leave about every second, then checks that every acked
value was consumed and that each partition's consumed offsets cover its whole log.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time

import klog
import klog.aio
from klog.config import ConsumerConfig, build
from klog.consumer.consumer_machine import ConsumerProtocol
from klog.consumer.group import Assign, Revoke
from klog.protocol.apis import (
    fetch,
    find_coordinator,
    heartbeat,
    join_group,
    metadata,
    offset_fetch,
    sync_group,
)
from klog.protocol.error_codes import ErrorCode
from klog.protocol.group_assignment import encode_assignment
from klog.protocol.records import build_batch
from klog.types import TopicPartition
from tests.client.fakes import fetch_answer, metadata_answer

TP = TopicPartition("t", 0)
NOW = 1_000_000


def batch(base: int, count: int) -> bytes:
    return build_batch([(1000 + i, None, b"v%d" % (base + i), []) for i in range(count)],
                       base_offset=base)


def only(requests, api):
    (request,) = [r for r in requests if r.api is api]
    return request


def offsets_of(core) -> list[int]:
    return [r.offset for records in core.take_records(100).values() for r in records]


def fetch_offset(request) -> int:
    return request.body.topics[0].partitions[0].fetch_offset


# sans-IO: the race, by hand -------------------------------------------------------------------


def test_a_fetch_from_before_an_unassign_and_reassign_is_stale():
    core = ConsumerProtocol(build(ConsumerConfig, "Consumer", {"bootstrap_servers": "h:1"}))
    core.assign([TP])
    core.on_response(only(core.poll(0), metadata), metadata_answer({"t": 1}), 0)
    core.seek(TP, 0)
    first = only(core.poll(0), fetch)
    core.on_response(first, fetch_answer(first, {("t", 0): batch(0, 3)}), 1)
    second = only(core.poll(1), fetch)  # pipelined: from 3, while 0..2 wait in the buffer
    assert fetch_offset(second) == 3
    core.assign([])  # 0..2 never handed out
    core.assign([TP])
    core.seek(TP, 0)  # as a group member would from the committed offset
    core.on_response(second, fetch_answer(second, {("t", 0): batch(3, 2)}), 2)
    third = only(core.poll(2), fetch)
    assert fetch_offset(third) == 0
    assert offsets_of(core) == []
    core.on_response(third, fetch_answer(third, {("t", 0): batch(0, 5)}), 3)
    assert offsets_of(core) == [0, 1, 2, 3, 4]


def _group_core() -> ConsumerProtocol:
    config = build(ConsumerConfig, "Consumer", {
        "bootstrap_servers": "h:1", "group_id": "g", "auto_offset_reset": "earliest",
        "heartbeat_interval_ms": 1000, "session_timeout_ms": 10_000})
    core = ConsumerProtocol(config)
    core.group.subscribe(topics=["t"])
    core.group.app_polled(NOW)
    first = core.poll(NOW)
    core.on_response(only(first, metadata), metadata_answer({"t": 1}), NOW)
    core.on_response(only(first, find_coordinator), find_coordinator.Response(
        node_id=7, host="h", port=1), NOW)
    return core


def _join(core, generation: int, now: int) -> list:
    join = only(core.poll(now), join_group)
    core.on_response(join, join_group.Response(
        generation_id=generation, protocol_name="range", leader="other", member_id="m1",
        members=[]), now)
    sync = only(core.poll(now), sync_group)
    core.on_response(sync, sync_group.Response(assignment=encode_assignment({"t": [0]})), now)
    out = []
    while (event := core.group.next_event()) is not None:
        out.append(event)
    return out


def _committed(core, offset: int, now: int) -> None:
    request = only(core.poll(now), offset_fetch)
    core.on_response(request, offset_fetch.Response(topics=[
        offset_fetch.OffsetFetchResponseTopic(name="t", partitions=[
            offset_fetch.OffsetFetchResponsePartition(partition_index=0,
                                                      committed_offset=offset)])]), now)


def test_an_eager_rebalance_keeping_a_partition_does_not_skip_buffered_records():
    """What the four-client interop test met: the member kept partition 10 through a
    rebalance; 309 was buffered, the Fetch from 310 in flight; 310 came next, 309 never."""
    core = _group_core()
    assert _join(core, 1, NOW) == [Assign(frozenset({TP}))]
    _committed(core, 307, NOW)
    first = only(core.poll(NOW), fetch)
    core.on_response(first, fetch_answer(first, {("t", 0): batch(307, 2)}), NOW)
    assert offsets_of(core) == [307, 308]
    second = only(core.poll(NOW), fetch)
    core.on_response(second, fetch_answer(second, {("t", 0): batch(309, 1)}), NOW)
    third = only(core.poll(NOW), fetch)  # from 310, while 309 waits in the buffer
    assert fetch_offset(third) == 310
    beat = only(core.poll(NOW + 1000), heartbeat)
    core.on_response(beat, heartbeat.Response(error_code=ErrorCode.REBALANCE_IN_PROGRESS),
                     NOW + 1000)
    core.poll(NOW + 1000)
    (revoke,) = list(iter(core.group.next_event, None))
    assert revoke == Revoke(frozenset({TP}))
    position = core.assignment.states[TP].position  # what the I/O layer commits: 309
    assert position == 309
    core.group.revoked(revoke)
    assert _join(core, 2, NOW + 1000) == [Assign(frozenset({TP}))]
    core.on_response(third, fetch_answer(third, {("t", 0): batch(310, 2)}), NOW + 1001)
    _committed(core, position, NOW + 1001)
    assert _drain(core, end=312, now=NOW + 1002) == [309, 310, 311]


def _drain(core, end: int, now: int) -> list[int]:
    """Everything handed out until the log (offsets < ``end``) is read, answering each
    Fetch with the records it asks for, as a broker would."""
    out = []
    for _ in range(10):
        out += offsets_of(core)
        if out and out[-1] == end - 1:
            break
        for request in core.poll(now):
            if request.api is fetch:
                start = fetch_offset(request)
                data = batch(start, end - start) if start < end else b""
                core.on_response(request, fetch_answer(request, {("t", 0): data}), now)
    return out


# a real appliance: members come and go while a producer writes -------------------------------

PARTITIONS = 12


class Member(threading.Thread):
    """One klog group member in a thread, logging in order what its listeners and polls saw:
    ``("assign"|"revoke", partitions)`` and ``("records", [(partition, offset, value)])``.
    ``kind``: "poll" (blocking poll), "iterate" (blocking iteration, a chunk at a time),
    "aio" (AIOConsumer.getmany-style polls)."""

    def __init__(self, bootstrap: str, group: str, topic: str, kind: str,
                 max_poll_records: int):
        super().__init__(daemon=True)
        self.options = dict(bootstrap_servers=bootstrap, group_id=group,
                            auto_offset_reset="earliest", session_timeout_ms=6000,
                            heartbeat_interval_ms=300, auto_commit_interval_ms=200,
                            max_poll_records=max_poll_records)
        self.topic, self.kind = topic, kind
        self.log: list[tuple] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def _listeners(self):
        return dict(on_assign=lambda ps: self.log.append(("assign", _numbers(ps))),
                    on_revoke=lambda ps: self.log.append(("revoke", _numbers(ps))))

    def _records(self, polled) -> None:
        items = [(tp.partition, r.offset, r.value) for tp, records in polled.items()
                 for r in records]
        if items:
            self.log.append(("records", items))

    def run(self) -> None:
        try:
            if self.kind == "aio":
                import asyncio
                asyncio.run(self._run_aio())
            else:
                self._run_blocking()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _run_blocking(self) -> None:
        with klog.Consumer(**self.options, consumer_timeout_ms=100) as consumer:
            consumer.subscribe([self.topic], **self._listeners())
            while not self.stopping.is_set():
                if self.kind == "poll":
                    self._records(consumer.poll(timeout_ms=100))
                    continue
                for record in consumer:  # ends after 100 ms without records
                    self._records({TopicPartition(self.topic, record.partition): [record]})
                    if self.stopping.is_set():
                        break

    async def _run_aio(self) -> None:
        async with klog.aio.AIOConsumer(**self.options) as consumer:
            consumer.subscribe([self.topic], **self._listeners())
            while not self.stopping.is_set():
                self._records(await consumer.poll(timeout_ms=100))

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert not self.is_alive(), f"{self.name} ({self.kind}) did not stop"

    def consumed(self) -> dict[int, set[int]]:
        out: dict[int, set[int]] = {}
        for kind, payload in self.log:
            if kind == "records":
                for partition, offset, _ in payload:
                    out.setdefault(partition, set()).add(offset)
        return out

    def gaps(self) -> list[str]:
        """Within each time it owned a partition, offsets handed out must follow each
        other (the topic has no control records)."""
        found, last = [], {}
        for kind, payload in self.log:
            if kind in ("assign", "revoke"):
                for partition in payload:
                    last.pop(partition, None)
            else:
                for partition, offset, _ in payload:
                    before = last.get(partition)
                    if before is not None and offset != before + 1:
                        found.append(f"{self.name} ({self.kind}) p{partition}: "
                                     f"{before} then {offset}")
                    last[partition] = offset
        return found


def _numbers(partitions) -> list[int]:
    return sorted(tp.partition for tp in partitions)


class Writer(threading.Thread):
    """A klog Producer writing unique values at about ``rate_per_s`` until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate_per_s: int = 1000):
        super().__init__(daemon=True)
        self.producer = klog.Producer(bootstrap_servers=bootstrap, linger_ms=5)
        self.topic, self.rate = topic, rate_per_s
        self.futures: list = []
        self.stopping = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            for _ in range(self.rate // 50):
                value = str(n).encode()
                self.futures.append((value, self.producer.send(self.topic, value,
                                                               key=str(n % 101).encode())))
                n += 1
            time.sleep(0.02)
        self.producer.close()  # flushes; a producer left open retries its brokers forever

    def acked(self) -> dict[bytes, tuple[int, int]]:
        """Value -> (partition, offset) of every acknowledged record."""
        out = {}
        for value, future in self.futures:
            with contextlib.suppress(klog.KlogError):
                meta = future.result(30)
                out[value] = (meta.partition, meta.offset)
        return out


def test_members_joining_and_leaving_every_second_skip_nothing(appliance_factory):
    appliance = appliance_factory(log_dirs=2,
                                  settings={"group.initial.rebalance.delay.ms": "0"})
    topic, group = "churn", "churners"
    with klog.Admin(appliance.bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS)
    rng = random.Random(1729)  # which members come and go, and when
    kinds = ["poll", "poll", "iterate", "aio"]
    everyone: list[Member] = []

    def join() -> Member:
        member = Member(appliance.bootstrap, group, topic, kind=kinds[len(everyone) % 4],
                        max_poll_records=rng.choice([500, 500, 7]))
        member.name = f"member-{len(everyone)}"
        everyone.append(member)
        member.start()
        return member

    writer = Writer(appliance.bootstrap, topic)
    writer.start()
    live = [join(), join()]
    try:
        churn_until = time.monotonic() + 14
        while time.monotonic() < churn_until:  # a rebalance about every 0.7 s
            time.sleep(rng.uniform(0.4, 1.0))
            if len(live) > 4 or (len(live) > 1 and rng.random() < 0.45):
                live.pop(rng.randrange(len(live))).stop()
            else:
                live.append(join())
        writer.stopping.set()
        writer.join(30)
        acked = writer.acked()
        assert len(acked) > 5000

        def consumed() -> dict[int, set[int]]:
            out: dict[int, set[int]] = {}
            for member in everyone:
                for partition, offsets in member.consumed().items():
                    out.setdefault(partition, set()).update(offsets)
            return out

        ends = {p: 0 for p in range(PARTITIONS)}
        for partition, offset in acked.values():
            ends[partition] = max(ends[partition], offset + 1)
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            seen = consumed()
            if all(len(seen.get(p, ())) >= ends[p] for p in ends):
                break
            time.sleep(0.2)
    finally:
        writer.stopping.set()
        writer.join(30)
        for member in live:
            member.stop()
    errors = [f"{m.name}: {m.error!r}" for m in everyone if m.error is not None]
    assert not errors, errors
    seen = consumed()
    holes = {p: sorted(set(range(ends[p])) - seen.get(p, set()))[:10] for p in ends}
    holes = {p: missing for p, missing in holes.items() if missing}
    gaps = [g for m in everyone for g in m.gaps()]
    values = {value for m in everyone for kind, payload in m.log if kind == "records"
              for _, _, value in payload}
    assert not holes and not gaps, (f"{len(everyone)} members; offsets never consumed "
                                    f"(partition: first ones): {holes}; gaps: {gaps[:10]}")
    assert set(acked) <= values
