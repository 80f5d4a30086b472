"""Many partitions under a descriptor limit (issue 26): the bound on open sealed segments, the
start-up warning, and the clear, retriable error when the limit is reached anyway.

One appliance of two workers runs under ``prlimit --nofile`` (a lowered hard limit, which the
supervisor raises the soft one to) with 64 KiB segments and ``log.open.segments.max`` small,
so the bound and the errors are exercised with a real client at a size CI can afford.
"""

from __future__ import annotations

import os
import random
import re
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.segments.config import LogConfig
from appliance.segments.descriptor_cache import CACHE, DEFAULT_GRACE_S, DEFAULT_LIMIT
from appliance.segments.log import PartitionLog
from klog.protocol.apis import fetch, produce
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch
from tests.conftest import Appliance
from tests.polling import wait_until
from tests.segments.batches import make_batch
from tests.worker.raw import RawClient

NOFILE = 1000  # per process: ~1,200 partitions fit on two workers, a fourth topic does not
OPEN_SEGMENTS = 8
PER_TOPIC = 400


# -- the storage engine alone: reads after eviction and reopening ------------------------------


def test_reads_after_eviction_and_reopening_equal_the_reads_before(tmp_path):
    config = LogConfig(segment_bytes=4096, index_interval_bytes=256)
    plog = PartitionLog.open(str(tmp_path / "p-0"), config, now_ms=0)
    rng = random.Random(7)
    for i in range(400):
        plog.append(make_batch(records=2, payload=rng.randbytes(rng.randrange(50, 400)),
                               base_timestamp=1_000 + i), now_ms=0)
    assert plog.segment_count > 20

    def everything():
        reads = [plog.read(offset, 1 << 20).read() for offset in range(0, 800, 3)]
        times = [plog.offset_for_timestamp(t) for t in range(990, 1_410, 7)]
        return reads, times

    before = everything()
    fds_before = len(os.listdir("/proc/self/fd"))
    CACHE.configure(2, 0.0)
    try:
        assert len(CACHE) <= 2 and CACHE.evictions >= plog.segment_count - 3
        assert len(os.listdir("/proc/self/fd")) <= fds_before - (plog.segment_count - 4)
        assert everything() == before  # every segment reopened (and evicted) on the way
        plog.append(make_batch(records=1, payload=b"after"), now_ms=0)  # the active one
        assert plog.read(800, 1 << 20).read().endswith(b"after")
    finally:
        CACHE.configure(DEFAULT_LIMIT, DEFAULT_GRACE_S)
        CACHE.close_due(everything=True)
        plog.close()


# -- an appliance under a lowered limit ---------------------------------------------------------


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    appliance = Appliance(
        tmp_path_factory.mktemp("many_partitions"), log_dirs=2,
        settings={"log.segment.bytes": 65536, "log.index.size.max.bytes": 4096,
                  "log.open.segments.max": OPEN_SEGMENTS,
                  "file.delete.delay.ms": 200},
        command_prefix=("prlimit", f"--nofile={NOFILE}:{NOFILE}"))
    appliance.start()
    try:
        yield appliance
    finally:
        appliance.stop()


def _create(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.create_topics([NewTopic(name, partitions, 1)])[name].exception(30)


def _worker_fds(appliance, index):
    return len(os.listdir(f"/proc/{appliance.worker_pid(index)}/fd"))


def test_create_topics_beyond_the_limit_is_refused_naming_it(limited):
    for i in range(3):
        assert _create(limited.bootstrap, f"many-{i}", PER_TOPIC) is None
    error = _create(limited.bootstrap, "many-3", PER_TOPIC)
    assert error is not None
    kafka_error = error.args[0]
    assert kafka_error.code() == ErrorCode.KAFKA_STORAGE_ERROR
    assert ErrorCode(kafka_error.code()).retriable  # Kafka: KafkaStorageException is retriable
    assert "RLIMIT_NOFILE" in kafka_error.str() and "ulimit -n" in kafka_error.str()
    listed = AdminClient({"bootstrap.servers": limited.bootstrap}).list_topics(timeout=10)
    assert "many-3" not in listed.topics  # refused before anything was decided
    assert "Traceback" not in limited.log_text()


def test_descriptors_stay_bounded_while_a_partition_grows_and_reads_match(limited):
    topic = "many-0"
    producer = Producer({"bootstrap.servers": limited.bootstrap, "linger.ms": 5,
                         "batch.size": 16384, "compression.type": "none"})
    values = [f"{i:06d}".encode() * 100 for i in range(6_000)]  # 3.6 MB: ~55 segments
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    held = PER_TOPIC * 3 // 2  # partitions per worker
    owner = next(i for i in range(2) if os.path.isdir(limited.log_dirs[i] / f"{topic}-0"))
    segments = len(list((limited.log_dirs[owner] / f"{topic}-0").glob("*.log")))
    assert segments > 40
    # descriptors: one per partition's active segment, the bound, a margin for sockets;
    # evicted descriptors close after file.delete.delay.ms (200 ms here)
    wait_until(lambda: _worker_fds(limited, owner) <= held + OPEN_SEGMENTS + 40,
               timeout_s=10, what="the worker's descriptors back under the bound")

    consumer = Consumer({"bootstrap.servers": limited.bootstrap, "group.id": "g-many",
                         "enable.auto.commit": False,
                         "max.partition.fetch.bytes": 65536})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        for message in consumer.consume(500, 1.0):
            assert message.error() is None
            got.append(message.value())
    consumer.close()
    assert got == values  # every sealed segment read through a reopened descriptor
    wait_until(lambda: _worker_fds(limited, owner) <= held + OPEN_SEGMENTS + 40,
               timeout_s=10, what="the descriptors the reads reopened closed again")


def test_reads_through_the_other_worker_keep_its_descriptors_bounded(limited):
    """Any worker serves any partition of the appliance (klog's client spreads its reads
    over them), through a reader of the owner's files per partition. Those readers are
    bounded too: reading 800 partitions of the other worker, under a limit of 1,000
    descriptors of which 600 hold its own active segments, would run out without it."""
    topics = ("many-1", "many-2")
    producer = Producer({"bootstrap.servers": limited.bootstrap, "linger.ms": 5})
    for topic in topics:
        for index in range(PER_TOPIC):
            producer.produce(topic, b"%s/%d" % (topic.encode(), index), partition=index)
    assert producer.flush(30) == 0
    held = PER_TOPIC * 3 // 2
    readers = 64  # appliance/workers/main.py: MIN_REMOTE_READERS (8 // 4 is below it)
    for worker in range(2):
        other = 1 - worker
        theirs = [(t, i) for t in topics for i in range(PER_TOPIC)
                  if (limited.log_dirs[other] / f"{t}-{i}").is_dir()]
        assert len(theirs) == PER_TOPIC  # half of each topic
        client = RawClient(limited.ports()[worker])
        for start in range(0, len(theirs), 50):
            chunk = theirs[start:start + 50]
            answer = client.call(
                fetch, 11, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                isolation_level=0, session_id=0, session_epoch=-1, topics=[
                    fetch.FetchTopic(topic=topic, partitions=[fetch.FetchPartition(
                        partition=i, current_leader_epoch=-1, fetch_offset=0,
                        log_start_offset=-1, partition_max_bytes=4096)
                        for t, i in chunk if t == topic])
                    for topic in topics], forgotten_topics_data=[], rack_id="")
            got = {(t.topic, part.partition_index): part for t in answer.responses
                   for part in t.partitions}
            for t, i in chunk:
                part = got.get((t, i))
                assert part is not None, (t, i, answer)
                assert part.error_code == ErrorCode.NONE, (t, i, part.error_code)
                assert b"%s/%d" % (t.encode(), i) in bytes(part.records)
        client.close()
        wait_until(lambda w=worker: _worker_fds(limited, w) <= held + OPEN_SEGMENTS + readers
                   + 40, timeout_s=10, what=f"worker {worker}'s descriptors under the bound")
    assert "Too many open files" not in limited.log_text()
    assert "Traceback" not in limited.log_text()


def test_partitions_beyond_the_limit_at_start_answer_storage_error(limited):
    """Restarted under a lower limit, the workers warn, open what fits, answer
    KAFKA_STORAGE_ERROR naming the limit for the rest, and keep serving the others."""
    limited.stop()
    limited.command_prefix = ("prlimit", "--nofile=500:500")
    limited.start(timeout_s=60)
    text = limited.log_text()
    assert re.search(r"holds \d+ partitions in \d+ segment files: its worker needs about "
                     r"\d+ descriptors, but RLIMIT_NOFILE is 500", text)
    unopened = re.findall(r"(many-\d+)-(\d+) not opened: .*RLIMIT_NOFILE 500", text)
    assert unopened
    topic, index = unopened[-1][0], int(unopened[-1][1])
    owner = next(i for i in range(2) if (limited.log_dirs[i] / f"{topic}-{index}").is_dir())
    client = RawClient(limited.ports()[owner])
    batch = build_batch([(1000, None, b"x", [])])
    answer = client.call(produce, 8, transactional_id=None, acks=1, timeout_ms=5000,
                         topic_data=[produce.TopicProduceData(name=topic, partition_data=[
                             produce.PartitionProduceData(index=index, records=batch)])])
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert "RLIMIT_NOFILE" in part.error_message
    answer = client.call(fetch, 11, replica_id=-1, max_wait_ms=0, min_bytes=1,
                         max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                         topics=[fetch.FetchTopic(topic=topic, partitions=[fetch.FetchPartition(
                             partition=index, current_leader_epoch=-1, fetch_offset=0,
                             log_start_offset=-1, partition_max_bytes=1 << 20)])],
                         forgotten_topics_data=[], rack_id="")
    assert answer.responses[0].partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    client.close()
    # the worker still serves the partitions it opened, with nothing lost
    consumer = Consumer({"bootstrap.servers": limited.bootstrap, "group.id": "g-many-2",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("many-0", 0, 5_999)])
    message = None
    deadline = time.monotonic() + 20
    while message is None and time.monotonic() < deadline:
        message = consumer.poll(1.0)
    consumer.close()
    assert message is not None and message.error() is None
    assert message.value() == b"005999" * 100
    assert "Traceback" not in limited.log_text()
