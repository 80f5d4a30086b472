"""The worker's LogCleaner over real Partitions: it picks the dirty compacted logs, cleans them
in its thread while appends and reads go on, keeps its checkpoint, counts what it did, stops
cleaning a partition whose log holds a corrupt batch (which keeps serving), and throttles."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from appliance.config import BrokerConfig
from appliance.segments import PartitionLog, cleaner_checkpoint
from appliance.workers.cleaner_throttle import Throttler
from appliance.workers.log_cleaner import LogCleaner
from appliance.workers.replication.context import ReplicaContext
from appliance.workers.replication.partition import Partition
from appliance.workers.replication.waiters import AppendWaiters
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch
from tests.replication.test_partition import Control, Publications

from .logs import SMALL, all_records, assert_compacted, write_updates

CONFIG = BrokerConfig(log_cleaner_backoff_ms=10, log_cleaner_io_buffer_size=4096)


@pytest.fixture
def partitions(tmp_path):
    made = []

    def build(name="t", index=0, config=SMALL):
        context = ReplicaContext(node_id=100, worker_index=0, log_dir=tmp_path,
                                 control=Control(), publisher=Publications(),
                                 waiters=AppendWaiters(), committer=None)
        plog = PartitionLog.open(str(tmp_path / f"{name}-{index}"), config, now_ms=0)
        partition = Partition(name, index, plog, context, ask_isr=lambda p, isr: None)
        made.append(partition)
        return partition

    yield build
    for partition in made:
        partition.close()


def _cleaner(tmp_path, partitions, config=CONFIG):
    return LogCleaner(partitions, tmp_path, config, clock=lambda: 10.0)


def test_a_pass_cleans_compacted_logs_only_and_checkpoints(tmp_path, partitions):
    compacted = partitions("orders")
    plain = partitions("events", config=dataclasses.replace(SMALL, cleanup_policy="delete"))
    latest = write_updates(compacted.log, 400, 10)
    write_updates(plain.log, 400, 10)
    before_plain = all_records(plain.log)
    before = all_records(compacted.log)
    log_cleaner = _cleaner(tmp_path, [compacted, plain])

    async def scenario():
        log_cleaner._pool = ThreadPoolExecutor(1)
        assert await log_cleaner.clean_pass() == 1
        assert await log_cleaner.clean_pass() == 0  # nothing dirty now
        log_cleaner._pool.shutdown()
    asyncio.run(scenario())
    assert_compacted(before, all_records(compacted.log), latest)
    assert all_records(plain.log) == before_plain
    saved = cleaner_checkpoint.read(tmp_path)
    assert saved[("orders", 0)] == compacted.log.segments.active.base_offset
    doc = log_cleaner.stats.document()
    assert doc["runs"] == 1 and doc["bytes_read"] > doc["bytes_written"] > 0
    assert [t for t, _, _ in doc["dirty_ratios"]] == ["orders"]
    assert LogCleaner([compacted], tmp_path, CONFIG).checkpoints == saved


def test_appends_and_reads_go_on_while_the_thread_cleans(tmp_path, partitions):
    partition = partitions("orders")
    latest = write_updates(partition.log, 3000, 50)
    log_cleaner = _cleaner(tmp_path, [partition])

    async def scenario():
        task = asyncio.ensure_future(log_cleaner.run())
        appended, lag = 0, 0.0
        loop = asyncio.get_running_loop()
        while log_cleaner.stats.runs == 0:
            before = loop.time()
            await asyncio.sleep(0.001)
            lag = max(lag, loop.time() - before - 0.001)
            outcome = partition.append_as_leader(
                build_batch([(10_000, b"key-%d" % (appended % 50), b"new-%d" % appended, ())]),
                now_ms=10_000)
            assert outcome.error == ErrorCode.NONE
            latest[b"key-%d" % (appended % 50)] = (outcome.base_offset, b"new-%d" % appended)
            piece = partition.read(0, 1 << 16)
            assert piece.length and os.pread(piece.fd, 61, piece.position)[16] == 2  # magic
            appended += 1
        task.cancel()
        return appended, lag
    appended, lag = asyncio.run(scenario())
    assert appended > 0
    records = {}
    for offset, key, value, _ in all_records(partition.log):
        records[key] = (offset, value)
    assert records == latest
    print(f"appends during the run: {appended}, worst loop lag {lag * 1000:.1f} ms")


def test_a_corrupt_batch_makes_the_partition_uncleanable_not_unserved(tmp_path, partitions):
    partition = partitions("orders")
    write_updates(partition.log, 300, 10)
    victim = partition.log.segments[1]
    with open(victim.path, "r+b") as file:
        file.seek(90)
        byte = file.read(1)
        file.seek(90)
        file.write(bytes([byte[0] ^ 0x55]))
    log_cleaner = _cleaner(tmp_path, [partition])

    async def scenario():
        log_cleaner._pool = ThreadPoolExecutor(1)
        assert await log_cleaner.clean_pass() == 0
        assert await log_cleaner.clean_pass() == 0  # not tried again
        log_cleaner._pool.shutdown()
    asyncio.run(scenario())
    assert log_cleaner.stats.uncleanable == {("orders", 0)}
    assert log_cleaner.stats.failures == 1
    assert partition.append_as_leader(build_batch([(1, b"k", b"v", ())]),
                                      now_ms=1).error == ErrorCode.NONE
    assert partition.read(0, 1000).length


def test_the_throttle_sleeps_to_hold_the_rate():
    now, slept = [0.0], []

    def sleep(s):
        slept.append(s)
        now[0] += s
    throttle = Throttler(1000.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(10):
        throttle(500)
    assert sum(slept) == pytest.approx(5.0, abs=0.01)  # 5000 bytes at 1000 B/s
    unlimited = Throttler(float("inf"), clock=lambda: now[0], sleep=sleep)
    unlimited(10**9)
    assert sum(slept) == pytest.approx(5.0, abs=0.01)
