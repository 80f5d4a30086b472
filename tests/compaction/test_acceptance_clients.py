"""Acceptance: a compacted topic on a real appliance, real clients.

confluent-kafka writes 100k updates over 1k keys (some of them tombstones, a few of those
stamped long ago) into small segments while a consumer reads along from the beginning; the
worker's cleaner runs meanwhile. Once it has cleaned through the data, confluent-kafka,
kafka-python and aiokafka each read the partition from the beginning and see the same
records: each key's last value at its original offset, tombstones only younger than
delete.retention.ms, every record one that was written, at its offset. Bad input: Kafka's
refusals of cleanup.policy values, and a record without a key (INVALID_RECORD)."""

from __future__ import annotations

import os
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from appliance.segments import cleaner_checkpoint
from tests.conftest import running_appliance

from .clients import (
    assert_compacted_view,
    latest_by_key,
    read_aiokafka,
    read_confluent,
    read_kafka_python,
    write_updates,
)

pytestmark = pytest.mark.interop

TOPIC = "changelog"
HOUR_MS = 3_600_000
CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(256 * 1024),
           "min.cleanable.dirty.ratio": "0.05", "delete.retention.ms": str(HOUR_MS),
           "segment.ms": "1500"}


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("compaction"), settings={
            "log.cleaner.backoff.ms": "200", "file.delete.delay.ms": "2000"}) as running:
        yield running


def _create(bootstrap, name, configs):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)],
                        operation_timeout=10)[name].result(30)


class ReadAlong(threading.Thread):
    """A consumer reading from the beginning to the end, again and again, while the updates
    are written and cleaned: each pass must see only records written, at their offsets, in
    order, and no error."""

    def __init__(self, bootstrap):
        super().__init__(daemon=True)
        self.bootstrap, self.passes, self.errors = bootstrap, [[]], []
        self.stop = threading.Event()

    def run(self):
        try:
            self._read()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.errors.append(exc)

    def _read(self):
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "along",
                             "enable.auto.commit": False, "check.crcs": True,
                             "enable.partition.eof": True,
                             "max.partition.fetch.bytes": 32768})
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        self.errors.append(msg.error())
                    elif self.passes[-1]:
                        self.passes.append([])
                        consumer.seek(TopicPartition(TOPIC, 0, 0))
                    continue
                self.passes[-1].append((msg.offset(), msg.key(), msg.value()))
        finally:
            consumer.close()


def _cleaned_through(appliance) -> int:
    found = cleaner_checkpoint.read(appliance.log_dirs[0])
    return found.get((TOPIC, 0), -1)


@pytest.fixture(scope="module")
def written(appliance):
    _create(appliance.bootstrap, TOPIC, CONFIGS)
    along = ReadAlong(appliance.bootstrap)
    along.start()
    started = time.monotonic()
    old = write_updates(appliance.bootstrap, TOPIC, 2_000, 1_000, seed=1, tombstone_every=4,
                        timestamp_ms=int(time.time() * 1000) - 2 * HOUR_MS)
    written = {**old, **write_updates(appliance.bootstrap, TOPIC, 100_000, 1_000, seed=2,
                                      tombstone_every=97)}
    produced_s = time.monotonic() - started
    time.sleep(1.6)  # segment.ms: the next append rolls, so every update is in a sealed segment
    written.update(write_updates(appliance.bootstrap, TOPIC, 1, 1, seed=3, prefix="last-"))
    end = max(written) + 1
    deadline = time.monotonic() + 90
    while _cleaned_through(appliance) < end - 1 and time.monotonic() < deadline:
        time.sleep(0.25)
    assert _cleaned_through(appliance) >= end - 1, "the cleaner did not clean the data"
    time.sleep(0.5)
    along.stop.set()
    along.join(30)
    print(f"100k updates produced in {produced_s:.1f} s; cleaned after "
          f"{time.monotonic() - started:.1f} s; the reader along read {len(along.passes)} "
          f"passes, {sum(map(len, along.passes))} records")
    assert not along.errors, along.errors[:3]
    assert len(along.passes) > 2
    for records in along.passes:
        assert_compacted_view(records, written)
    return written, end


def _check(got, written, end):
    assert_compacted_view(got, written)
    latest = latest_by_key({o: r for o, r in written.items() if o < end - 1})
    live = {k: r for k, r in latest.items() if r[2] is not None}
    seen = {r[1]: r for r in got if r[0] < end - 1}
    for key, record in live.items():  # each key's last value, at its original offset
        assert seen.get(key) == record, key
    below = [r for r in got if r[0] < end - 1]
    assert len(below) == len({r[1] for r in below})  # nothing superseded is left
    tombstones = [r for r in below if r[2] is None]
    young = {r for r in latest.values() if r[2] is None and r[0] >= 2_000}
    assert set(tombstones) == young  # the two-hour-old ones are gone, the young ones kept
    assert young


def test_confluent_reads_each_keys_last_value(appliance, written):
    records, end = written
    got = read_confluent(appliance.bootstrap, TOPIC, end)
    _check(got, records, end)
    assert len(got) < 1_100


def test_kafka_python_and_aiokafka_read_the_same(appliance, written):
    records, end = written
    reference = read_confluent(appliance.bootstrap, TOPIC, end)
    assert read_kafka_python(appliance.bootstrap, TOPIC, end) == reference
    assert read_aiokafka(appliance.bootstrap, TOPIC, end) == reference


def test_the_log_shrank_and_the_cleaner_says_so(appliance, written):
    directory = appliance.log_dirs[0] / f"{TOPIC}-0"
    size = sum(os.path.getsize(directory / n) for n in os.listdir(directory)
               if n.endswith(".log"))
    assert size < 2 * 1024 * 1024  # 100k updates of ~25 bytes, cleaned to ~1k records
    admin = AdminClient({"bootstrap.servers": appliance.bootstrap})
    resource = ConfigResource("topic", TOPIC)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert {k: configs[k].value for k in CONFIGS} == CONFIGS


@pytest.mark.parametrize("policy", ["compacted", "compact,forget", ""])
def test_cleanup_policy_values_kafka_refuses(appliance, policy):
    with pytest.raises(KafkaException) as raised:
        _create(appliance.bootstrap, "refused", {"cleanup.policy": policy})
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_a_record_without_a_key_is_refused(appliance, written):
    producer = Producer({"bootstrap.servers": appliance.bootstrap, "retries": 0,
                         "enable.idempotence": False})
    outcome = []
    producer.produce(TOPIC, value=b"no key", partition=0,
                     on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(10)
    assert outcome and outcome[0] is not None
    assert outcome[0].code() == KafkaError.INVALID_RECORD


def test_aborted_transactions_are_cleaned_away(appliance, written):
    topic = "txn-changelog"
    _create(appliance.bootstrap, topic, {**CONFIGS, "segment.ms": "1000"})
    producer = Producer({"bootstrap.servers": appliance.bootstrap,
                         "transactional.id": "compaction-txn"})
    producer.init_transactions(30)
    for n in range(6):
        producer.begin_transaction()
        for i in range(50):
            producer.produce(topic, key=f"k{i}".encode(), value=f"{n}-{i}".encode(),
                             partition=0)
        producer.flush(30)  # in the log before the marker (an abort would purge them unsent)
        if n % 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    time.sleep(1.1)  # segment.ms: the next transaction's first append rolls
    producer.begin_transaction()
    last = []
    producer.produce(topic, key=b"last", value=b"last", partition=0,
                     on_delivery=lambda err, msg: last.append(msg.offset()))
    producer.commit_transaction(30)
    assert last and last[0] > 300  # six transactions of 50 and their markers before it
    deadline = time.monotonic() + 30
    while cleaner_checkpoint.read(appliance.log_dirs[0]).get((topic, 0), -1) < last[0]:
        assert time.monotonic() < deadline, "the cleaner did not clean the transactions"
        time.sleep(0.2)
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": isolation,
                             "isolation.level": isolation, "enable.partition.eof": True})
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        while True:
            msg = consumer.poll(10)
            assert msg is not None
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF
                break
            values.append(msg.value())
        consumer.close()
        # aborted data is gone from the log itself: even read_uncommitted sees none of it
        assert values == [f"4-{i}".encode() for i in range(50)] + [b"last"], isolation


def test_a_corrupt_batch_stops_cleaning_that_partition_which_keeps_serving(appliance, written):
    topic = "corrupted"
    _create(appliance.bootstrap, topic, {**CONFIGS, "segment.bytes": str(16 * 1024),
                                         "min.cleanable.dirty.ratio": "0.9"})
    first = write_updates(appliance.bootstrap, topic, 3_000, 50, seed=7)
    directory = appliance.log_dirs[0] / f"{topic}-0"
    # a new log is all dirty (ratio 1 >= 0.9): let its first cleaning finish, so that the
    # damage goes into a segment that stays (damaged before or during that cleaning, it could
    # land in a file the swap then deleted); every later cleaning reads the cleaned head again
    deadline = time.monotonic() + 30
    while (cleaner_checkpoint.read(appliance.log_dirs[0]).get((topic, 0), -1) <= 0
           or any(directory.glob("*.cleaned")) or any(directory.glob("*.swap"))):
        assert time.monotonic() < deadline, "the first cleaning did not finish"
        time.sleep(0.2)
    cleaned_to = cleaner_checkpoint.read(appliance.log_dirs[0])[(topic, 0)]
    victim = next(path for path in sorted(directory.glob("*.log"))  # cleaned, sealed, holding
                  if int(path.stem) < cleaned_to and path.stat().st_size > 400)  # batches:
    # the next updates make the log dirty enough again, and the next cleaning meets the damage
    with open(victim, "r+b") as file:
        file.seek(200)
        byte = file.read(1)
        file.seek(200)
        file.write(bytes([byte[0] ^ 0xFF]))
    more = write_updates(appliance.bootstrap, topic, 3_000, 50, seed=8)
    deadline = time.monotonic() + 30
    while "corrupted-0 stopped" not in appliance.log_text():
        assert time.monotonic() < deadline, "the cleaner did not report the corrupt batch"
        time.sleep(0.2)
    assert "no longer cleaned" in appliance.log_text()
    after = write_updates(appliance.bootstrap, topic, 10, 5, seed=9)  # it still takes writes
    end = max(after) + 1
    last_sealed = int(sorted(directory.glob("*.log"))[-1].stem)
    consumer = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": "corrupt",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, last_sealed)])  # past the damage: served
    got = []
    while True:
        msg = consumer.poll(10)
        assert msg is not None
        if msg.error():
            break
        got.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    assert got and got[-1][0] == end - 1
    assert_compacted_view(got, {**first, **more, **after})
