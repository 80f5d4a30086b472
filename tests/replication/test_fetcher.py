"""A follower's fetcher (appliance/workers/replication/fetcher.py) against a scripted leader: a
partition the leader refuses is left out of the requests for its pause while the fetcher's
other partitions go on being copied (one refusal must not hold the others' high watermark);
a partition added while a Fetch waits at the leader does not wait for that Fetch."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from appliance.segments import LogConfig, PartitionLog
from appliance.segments.errors import StorageError
from appliance.workers.replication import fetcher as replica_fetcher
from appliance.workers.replication.context import ReplicaContext
from appliance.workers.replication.dialing import LinkSecurity
from appliance.workers.replication.fetcher import ReplicaFetcher
from appliance.workers.replication.partition import Partition
from appliance.workers.replication.waiters import AppendWaiters
from klog.protocol.apis import fetch
from klog.protocol.chunks import join_chunks
from klog.protocol.error_codes import ErrorCode
from klog.protocol.frames import NEED_DATA
from klog.protocol.records import build_batch
from klog.protocol.server import ServerConnection

LEADER, EPOCH = 200, 3
COPIED, REFUSED = ("copied", 0), ("refused", 0)


class Leader:
    """Answers Fetch: a fresh batch at the asked offset of COPIED, NOT_LEADER for REFUSED.
    `hold_alone`: a Fetch of COPIED alone, after its first, is held (never answered), as a
    long poll waiting for appends."""

    def __init__(self, hold_alone: bool = False, high_watermark: int = 0):
        self.hold_alone = hold_alone
        self.high_watermark = high_watermark  # what each answer states
        self.asked: list[set] = []  # the partitions of each Fetch
        self.offsets: list[int] = []  # COPIED's fetch offset in each Fetch
        self.connections = 0

    async def serve(self, reader, writer):
        self.connections += 1
        server = ServerConnection()
        while data := await reader.read(65536):
            server.receive_data(data)
            while (request := server.next_request()) is not NEED_DATA:
                if self.hold_alone and self.asked and {
                        (t.topic, p.partition) for t in request.body.topics
                        for p in t.partitions} == {COPIED}:
                    self.asked.append({COPIED})
                    continue  # held: this connection answers nothing more
                writer.write(join_chunks(server.encode_response(request, self.answer(
                    request.body))))

    def answer(self, body):
        parts = [(t.topic, p) for t in body.topics for p in t.partitions]
        self.asked.append({(topic, p.partition) for topic, p in parts})
        return fetch.Response(throttle_time_ms=0, error_code=0, session_id=0, responses=[
            fetch.FetchableTopicResponse(topic=topic, partitions=[self.partition(topic, p)])
            for topic, p in parts])

    def partition(self, topic, asked):
        if (topic, asked.partition) == COPIED:
            self.offsets.append(asked.fetch_offset)
        refused = (topic, asked.partition) == REFUSED and not self.hold_alone
        batch = build_batch([(1000, None, b"v", [])])
        if not refused:  # a batch at the follower's log end, stamped with the leader's epoch
            batch = bytearray(batch)
            batch[0:8] = asked.fetch_offset.to_bytes(8, "big")
            batch[12:16] = EPOCH.to_bytes(4, "big")  # outside the CRC
        return fetch.PartitionData(
            partition_index=asked.partition, error_code=int(
                ErrorCode.NOT_LEADER_OR_FOLLOWER if refused else ErrorCode.NONE),
            high_watermark=self.high_watermark, last_stable_offset=0, log_start_offset=0,
            aborted_transactions=None, preferred_read_replica=-1,
            records=b"" if refused else bytes(batch))


class Unpublished:
    """A publisher for partitions outside any appliance: nothing goes to shm."""

    def attach_point(self, topic, index):
        return None

    def start(self, topic, index, plog):
        return None

    def publish(self, publication, plog, records_in=0, bytes_in=0):
        pass


class Followers:
    """What the fetcher uses of its replica manager, with real partitions of real logs."""

    node_id = 300

    def __init__(self, tmp_path, port: int):
        self.port = port
        context = ReplicaContext(node_id=self.node_id, worker_index=0, log_dir=tmp_path,
                                 control=None, publisher=Unpublished(), waiters=AppendWaiters(),
                                 committer=None)
        self.partitions = {
            key: Partition(*key, PartitionLog.open(str(tmp_path / f"{key[0]}-{key[1]}"),
                                                   LogConfig(segment_bytes=1 << 20), now_ms=0),
                           context, ask_isr=lambda partition, isr: None)
            for key in (COPIED, REFUSED)}
        self.logs = {key: p.log for key, p in self.partitions.items()}
        self.throttle = SimpleNamespace(limits=lambda keys, size: (dict.fromkeys(keys, size),
                                                                   set()))
        self.link_security = LinkSecurity()

    def now_ms(self) -> int:
        return 0

    def leader_address(self, leader):
        return ("127.0.0.1", self.port) if leader == LEADER else None

    def following(self, key, leader, leader_epoch):
        return self.partitions[key] if leader == LEADER else None


def test_a_refused_partition_waits_its_pause_while_the_others_are_copied(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(replica_fetcher, "RETRY_MIN_S", 60.0)  # a pause this test outlives

    async def run():
        leader = Leader()
        server = await asyncio.start_server(leader.serve, "127.0.0.1", 0)
        replication = Followers(tmp_path, server.sockets[0].getsockname()[1])
        fetcher = ReplicaFetcher(replication, LEADER)
        for key in (COPIED, REFUSED):
            fetcher.add(key, EPOCH)
        try:
            while replication.logs[COPIED].log_end_offset < 5:
                await asyncio.sleep(0.01)
        finally:
            fetcher.stop()
            server.close()
            for plog in replication.logs.values():
                plog.close()
        return leader.asked, replication.logs[REFUSED].log_end_offset
    asked, refused_end = asyncio.run(run())
    assert asked[0] == {COPIED, REFUSED} and refused_end == 0
    assert len(asked) >= 5 and all(fetched == {COPIED} for fetched in asked[1:])


def test_a_partition_added_while_a_fetch_waits_at_the_leader_is_fetched_without_it(tmp_path):
    async def run():
        leader = Leader(hold_alone=True)
        server = await asyncio.start_server(leader.serve, "127.0.0.1", 0)
        replication = Followers(tmp_path, server.sockets[0].getsockname()[1])
        fetcher = ReplicaFetcher(replication, LEADER)
        fetcher.add(COPIED, EPOCH)
        try:
            while len(leader.asked) < 2:  # the first answered, the second held
                await asyncio.sleep(0.01)
            fetcher.add(REFUSED, EPOCH)  # (answered here: the leader holds no more)
            deadline = asyncio.get_running_loop().time() + 20  # the held Fetch is never answered
            while replication.logs[REFUSED].log_end_offset == 0:
                assert asyncio.get_running_loop().time() < deadline, leader.asked
                await asyncio.sleep(0.01)
        finally:
            fetcher.stop()
            server.close()
            for plog in replication.logs.values():
                plog.close()
        return leader.asked
    asked = asyncio.run(run())
    assert asked[:2] == [{COPIED}, {COPIED}] and {COPIED, REFUSED} in asked[2:]


def test_stop_ends_the_loop_even_if_its_cancellation_is_lost(tmp_path):
    """Python 3.11's asyncio.wait_for can swallow a cancellation that arrives as its wait
    completes; the loop must end on stop() anyway, or the worker never exits (its asyncio.run
    waits for every task). The cancellation is dropped here outright."""
    async def run():
        leader = Leader()
        server = await asyncio.start_server(leader.serve, "127.0.0.1", 0)
        replication = Followers(tmp_path, server.sockets[0].getsockname()[1])
        fetcher = ReplicaFetcher(replication, LEADER)
        fetcher.add(COPIED, EPOCH)
        try:
            while replication.logs[COPIED].log_end_offset < 3:
                await asyncio.sleep(0.01)
            fetcher._task.cancel = lambda *args: False  # the cancellation is lost
            fetcher.stop()
            done, _ = await asyncio.wait({fetcher._task}, timeout=5)
        finally:
            del fetcher._task.cancel  # a real one again, for asyncio.run's clean-up
            server.close()
            for plog in replication.logs.values():
                plog.close()
        return bool(done)
    assert asyncio.run(run()), "the fetcher's loop went on after stop()"


def copy_with_a_failed_append(tmp_path, high_watermark: int):
    """COPIED followed from a leader whose answers state `high_watermark`; its fourth append
    fails once (a storage error). The leader's record: (connections, fetch offsets)."""

    async def run():
        leader = Leader(high_watermark=high_watermark)
        server = await asyncio.start_server(leader.serve, "127.0.0.1", 0)
        replication = Followers(tmp_path, server.sockets[0].getsockname()[1])
        partition = replication.partitions[COPIED]
        append, failed = partition.append_as_follower, []

        def failing_once(records, **kwargs):
            if partition.log.log_end_offset == 3 and not failed:
                failed.append(True)
                raise StorageError("disk full", path="x.log", errno=28, operation="append")
            return append(records, **kwargs)

        partition.append_as_follower = failing_once
        fetcher = ReplicaFetcher(replication, LEADER)
        fetcher.add(COPIED, EPOCH)
        try:
            while replication.logs[COPIED].log_end_offset < 8:
                await asyncio.sleep(0.01)
        finally:
            fetcher.stop()
            server.close()
            for plog in replication.logs.values():
                plog.close()
        return leader.connections, leader.offsets

    return asyncio.run(run())


def test_a_catching_up_follower_fetches_ahead_and_a_failed_append_drops_that_fetch(tmp_path):
    """Below the leader's high watermark the next Fetch leaves before the append (pipelined):
    when that append fails, the answer in flight is dropped with its connection, and the
    copy goes on from the log's real end, with nothing skipped."""
    connections, offsets = copy_with_a_failed_append(tmp_path, high_watermark=10**9)
    assert connections == 2  # the pipelined fetch's connection was dropped
    assert offsets[:5] == [0, 1, 2, 3, 4]  # 4: asked ahead while the append of 3 failed
    resumed = offsets[5:]
    assert resumed[0] == 3 and resumed == list(range(3, 3 + len(resumed)))


def test_a_follower_at_the_high_watermark_is_never_fetched_ahead(tmp_path):
    """An answer reaching the leader's high watermark (an in-sync follower's) is appended
    before the next Fetch names the new log end: acks=all counts only copies that are there."""
    connections, offsets = copy_with_a_failed_append(tmp_path, high_watermark=0)
    assert connections == 1
    assert offsets[:5] == [0, 1, 2, 3, 3]
