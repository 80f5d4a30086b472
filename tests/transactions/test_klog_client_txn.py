"""klog's own transactional client against a real appliance: `klog.Producer(transactional_id=)`
(and the asyncio twin) commits and aborts, a second producer with the same id fences the
first, and `klog.Consumer(isolation_level="read_committed")` never delivers an aborted record
nor a control record, while read_uncommitted sees the aborted ones. One appliance for the
module; each test its own topic and transactional id. The exactly-once loop runs klog's own
consume-transform-produce process (tests/transactions/klog_eos_loop.py), killed with
SIGKILL at a seeded point (KLOG_TXN_SEED, default 23) and run again."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time

import pytest

import klog
import klog.aio
from klog import TopicPartition
from klog.errors import (
    ProducerFencedError,
    TransactionFatalError,
    TransactionStateError,
)
from tests.conftest import FAST_GROUPS, REPO, running_appliance, topic_maker
from tests.transactions.coordinator_helpers import SETTINGS, coordinator, wait_for_state

TIMEOUT = 20


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("klog-client-txn"),
                           settings={**SETTINGS, **FAST_GROUPS}) as started:
        yield started


@pytest.fixture(scope="module")
def new_topic(appliance):
    return topic_maker(appliance.bootstrap, partitions=2, prefix="kct")


def transactional(appliance, transactional_id: str, **options) -> klog.Producer:
    return klog.Producer(bootstrap_servers=appliance.bootstrap,
                         transactional_id=transactional_id, linger_ms=0, **options)


def read_all(appliance, topic: str, isolation_level: str, partitions=(0, 1)) -> list:
    """Every record a consumer with this isolation level delivers, up to the end offsets it
    sees (for read_committed: the last stable offset); checks positions reach those ends."""
    with klog.Consumer(bootstrap_servers=appliance.bootstrap,
                       isolation_level=isolation_level) as consumer:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps, timeout_ms=TIMEOUT * 1000)
        records = []
        deadline = time.monotonic() + TIMEOUT
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, {tp: consumer.position(tp) for tp in tps}
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
        return records


def values(records) -> list[bytes]:
    return sorted(r.value for r in records)


def test_commit_is_visible_to_read_committed(appliance, new_topic):
    topic = new_topic()
    with transactional(appliance, "kct-commit") as producer:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, b"c%d" % i, partition=i % 2)
        producer.commit_transaction(TIMEOUT)
    committed = read_all(appliance, topic, "read_committed")
    assert values(committed) == sorted(b"c%d" % i for i in range(10))
    # the markers are visible before the coordinator writes CompleteCommit (Kafka's order too)
    state = wait_for_state(coordinator(appliance, "kct-commit"), "kct-commit", "CompleteCommit")
    assert state.transaction_state == "CompleteCommit"


def test_abort_is_invisible_to_read_committed_only(appliance, new_topic):
    topic = new_topic()
    with transactional(appliance, "kct-abort") as producer:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        for i in range(6):
            producer.send(topic, b"aborted-%d" % i, partition=i % 2)
        producer.flush(TIMEOUT)  # on the log: the abort must hide written records
        producer.abort_transaction(TIMEOUT)
        producer.begin_transaction()
        producer.send(topic, b"kept-0", partition=0)
        producer.send(topic, b"kept-1", partition=1)
        producer.commit_transaction(TIMEOUT)
    committed = read_all(appliance, topic, "read_committed")
    assert values(committed) == [b"kept-0", b"kept-1"]  # and no control record
    uncommitted = read_all(appliance, topic, "read_uncommitted")
    assert values(uncommitted) == sorted([b"kept-0", b"kept-1"] +
                                         [b"aborted-%d" % i for i in range(6)])


def test_open_transaction_holds_read_committed_at_the_lso(appliance, new_topic):
    topic = new_topic(partitions=1)
    with transactional(appliance, "kct-open") as producer:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.send(topic, b"pending", partition=0).result(TIMEOUT)
        tp = TopicPartition(topic, 0)
        with klog.Consumer(bootstrap_servers=appliance.bootstrap,
                           isolation_level="read_committed") as consumer:
            assert consumer.end_offsets([tp], timeout_ms=TIMEOUT * 1000)[tp] == 0
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            assert consumer.poll(timeout_ms=500) == {}
            producer.commit_transaction(TIMEOUT)
            got = []
            deadline = time.monotonic() + TIMEOUT
            while not got:
                assert time.monotonic() < deadline
                got = consumer.poll(timeout_ms=200).get(tp, [])
            assert [r.value for r in got] == [b"pending"]


def test_second_producer_fences_the_first(appliance, new_topic):
    topic = new_topic(partitions=1)
    old = transactional(appliance, "kct-fence")
    old.init_transactions(TIMEOUT)
    old.begin_transaction()
    old.send(topic, b"zombie-before", partition=0).result(TIMEOUT)
    with transactional(appliance, "kct-fence") as new:
        new.init_transactions(TIMEOUT)  # aborts the old one's transaction, bumps the epoch
        with pytest.raises(TransactionFatalError) as raised:
            old.send(topic, b"zombie-after", partition=0)
            old.commit_transaction(TIMEOUT)
        assert isinstance(raised.value, ProducerFencedError) or isinstance(
            raised.value.cause, ProducerFencedError), raised.value
        with pytest.raises(TransactionFatalError):
            old.begin_transaction()  # fatal from now on: close
        old.close(0)
        new.begin_transaction()
        new.send(topic, b"new", partition=0)
        new.commit_transaction(TIMEOUT)
    assert values(read_all(appliance, topic, "read_committed", (0,))) == [b"new"]


def test_calls_out_of_order_say_what_to_do(appliance, new_topic):
    topic = new_topic(partitions=1)
    with transactional(appliance, "kct-order") as producer:
        with pytest.raises(TransactionStateError, match="init_transactions"):
            producer.send(topic, b"x")
        producer.init_transactions(TIMEOUT)
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            producer.send(topic, b"x")
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            producer.commit_transaction(TIMEOUT)
        producer.begin_transaction()
        producer.commit_transaction(TIMEOUT)  # empty: ends without an EndTxn
    with (klog.Producer(bootstrap_servers=appliance.bootstrap) as plain,
          pytest.raises(TransactionStateError, match="transactional_id")):
        plain.begin_transaction()
    with pytest.raises(ValueError, match="enable_idempotence"):
        klog.Producer(bootstrap_servers=appliance.bootstrap, transactional_id="x",
                      enable_idempotence=False)


def test_asyncio_twin_commits_and_aborts(appliance, new_topic):
    topic = new_topic()

    async def run():
        async with klog.aio.AIOProducer(bootstrap_servers=appliance.bootstrap,
                                        transactional_id="kct-aio", linger_ms=0) as producer:
            await producer.init_transactions(TIMEOUT)
            producer.begin_transaction()
            await (await producer.send(topic, b"aio-aborted", partition=0))
            await producer.abort_transaction(TIMEOUT)
            producer.begin_transaction()
            await producer.send(topic, b"aio-kept", partition=1)
            async with klog.aio.AIOConsumer(bootstrap_servers=appliance.bootstrap,
                                            group_id="kct-aio-group") as member:
                metadata = member.group_metadata()
            assert metadata.group_id == "kct-aio-group" and metadata.generation_id == -1
            await producer.send_offsets_to_transaction({TopicPartition(topic, 1): 1},
                                                       metadata, TIMEOUT)
            await producer.commit_transaction(TIMEOUT)
        async with klog.aio.AIOConsumer(bootstrap_servers=appliance.bootstrap,
                                        isolation_level="read_committed") as consumer:
            tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            got = []
            deadline = time.monotonic() + TIMEOUT
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                assert time.monotonic() < deadline
                for batch in (await consumer.poll(timeout_ms=200)).values():
                    got.extend(r.value for r in batch)
            return got

    assert asyncio.run(run()) == [b"aio-kept"]
    with klog.Admin(appliance.bootstrap) as admin:
        committed = admin.list_group_offsets("kct-aio-group")
    assert committed[TopicPartition(topic, 1)] == 1


def test_consume_transform_produce_is_exactly_once_across_a_kill_9(appliance, new_topic):
    source, sink = new_topic(), new_topic()
    counts = {0: 120, 1: 80}
    with klog.Producer(bootstrap_servers=appliance.bootstrap) as plain:
        for partition, count in counts.items():
            plain.send_batch(source, [b"r%d-%d" % (partition, i) for i in range(count)],
                             partition=partition)
        plain.flush(TIMEOUT)
    rng = random.Random(int(os.environ.get("KLOG_TXN_SEED", "23")))
    die_at = f"{rng.randint(2, 5)}:{rng.choice(['sent', 'offsets', 'committed'])}"
    loop = [sys.executable, "-m", "tests.transactions.klog_eos_loop", appliance.bootstrap,
            source, sink, "--ends", ",".join(f"{p}:{n}" for p, n in counts.items())]
    killed = subprocess.run([*loop, "--die-at", die_at], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert killed.returncode == -9, (die_at, killed.stderr[-2000:])
    finished = subprocess.run(loop, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, (die_at, finished.stderr[-2000:])
    out = read_all(appliance, sink, "read_committed")
    for partition, count in counts.items():
        mine = sorted((r for r in out if r.partition == partition), key=lambda r: r.offset)
        assert [r.value for r in mine] == [b"R%d-%d" % (partition, i) for i in range(count)], \
            die_at  # every input once, transformed, in the partition's order
