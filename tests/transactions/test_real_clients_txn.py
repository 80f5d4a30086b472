"""Issue 23's acceptance with real clients end to end, coordinator and partition side together:
transactional producers of confluent-kafka, kafka-python and aiokafka, and consumers of the
three in read_committed and read_uncommitted.

- an aborted transaction is invisible to read_committed consumers and visible to
  read_uncommitted ones (one shared topic, every client writing a committed and an aborted
  transaction, every client reading);
- an open transaction holds read_committed consumers at the last stable offset (even the
  plain records written after it) until it ends, while read_uncommitted ones read on;
- a transaction left open past ``transaction.timeout.ms`` is aborted by the coordinator;
- zombie fencing: a second producer with the same ``transactional.id`` fences the first,
  whose next send or commit fails and whose writes are never visible;
- aiokafka's consume-transform-produce loop (``send_offsets_to_transaction``) is exactly
  once across a restart in the middle of a transaction.

One appliance for the module; each test has its own topic and transactional ids.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from tests.conftest import running_appliance, topic_maker
from tests.transactions.coordinator_helpers import (
    SETTINGS,
    coordinator,
    describe,
    wait_for_state,
)

CLIENTS = ["confluent", "kafka-python", "aiokafka"]
ISOLATIONS = ["read_committed", "read_uncommitted"]


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("txn-real"), log_dirs=2,
                           settings=SETTINGS) as started:
        yield started


@pytest.fixture(scope="module")
def new_topic(appliance):
    return topic_maker(appliance.bootstrap, partitions=1, prefix="txn-real")


# -- readers: a consumer of each client that stays open across polls -------------------------

class Reader:
    """A consumer of partition 0 of ``topic`` from offset 0; ``poll()`` returns the values
    that arrived since the last call (within about ``wait_s``)."""

    def __init__(self, client: str, bootstrap: str, topic: str, isolation: str):
        self.client, self.isolation = client, isolation
        self.values: list[str] = []
        if client == "confluent":
            from confluent_kafka import Consumer, TopicPartition

            self.consumer = Consumer({"bootstrap.servers": bootstrap,
                                      "group.id": f"g-{topic}-{isolation}",
                                      "enable.auto.commit": False,
                                      "isolation.level": isolation,
                                      "fetch.wait.max.ms": 100})
            self.consumer.assign([TopicPartition(topic, 0, 0)])
        elif client == "kafka-python":
            from kafka import KafkaConsumer, TopicPartition

            self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                          isolation_level=isolation, fetch_max_wait_ms=100)
            self.consumer.assign([TopicPartition(topic, 0)])
            self.consumer.seek(TopicPartition(topic, 0), 0)
        else:
            from aiokafka import AIOKafkaConsumer, TopicPartition

            self.loop = asyncio.new_event_loop()

            async def start():
                consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap,
                                            enable_auto_commit=False,
                                            isolation_level=isolation, fetch_max_wait_ms=100)
                await consumer.start()
                consumer.assign([TopicPartition(topic, 0)])
                consumer.seek(TopicPartition(topic, 0), 0)
                return consumer

            self.consumer = self.loop.run_until_complete(start())

    def poll(self, wait_s: float = 0.2) -> list[str]:
        if self.client == "confluent":
            got = []
            deadline = time.monotonic() + wait_s
            while True:
                message = self.consumer.poll(max(0.0, deadline - time.monotonic()))
                if message is not None and message.error() is None:
                    got.append(message.value().decode())
                if time.monotonic() >= deadline:
                    break
        elif self.client == "kafka-python":
            got = [r.value.decode() for records in
                   self.consumer.poll(int(wait_s * 1000)).values() for r in records]
        else:
            batches = self.loop.run_until_complete(
                self.consumer.getmany(timeout_ms=int(wait_s * 1000)))
            got = [r.value.decode() for records in batches.values() for r in records]
        self.values.extend(got)
        return got

    def close(self) -> None:
        if self.client == "aiokafka":
            self.loop.run_until_complete(self.consumer.stop())
            self.loop.close()
        else:
            self.consumer.close()


def readers(appliance, topic: str, clients=CLIENTS, isolations=ISOLATIONS) -> list[Reader]:
    return [Reader(c, appliance.bootstrap, topic, i) for c in clients for i in isolations]


def read_until(readers_: list[Reader], wanted, timeout_s: float = 20,
               settle_s: float = 1.0) -> dict[tuple[str, str], list[str]]:
    """Poll every reader until each has ``wanted(reader)`` values in all, then ``settle_s``
    more (anything further would show); ``{(client, isolation): values}``."""
    deadline = time.monotonic() + timeout_s
    settled = None
    while time.monotonic() < deadline:
        for reader in readers_:
            reader.poll(0.05)
        if settled is None and all(len(r.values) >= wanted(r) for r in readers_):
            settled = time.monotonic() + settle_s
        if settled is not None and time.monotonic() >= settled:
            break
    return {(r.client, r.isolation): list(r.values) for r in readers_}


def close_all(readers_: list[Reader]) -> None:
    for reader in readers_:
        reader.close()


# -- producers -------------------------------------------------------------------------------

def confluent_producer(appliance, transactional_id: str | None, **extra) -> Producer:
    config = {"bootstrap.servers": appliance.bootstrap, "message.timeout.ms": 20_000,
              "socket.timeout.ms": 10_000, "linger.ms": 5}
    if transactional_id is not None:
        config.update({"transactional.id": transactional_id, "transaction.timeout.ms": 60_000})
    config.update(extra)
    return Producer(config)


def confluent_transaction(appliance, transactional_id: str, topic: str,
                          batches: list[tuple[str, bool]]) -> None:
    p = confluent_producer(appliance, transactional_id)
    p.init_transactions(20)
    for value, commit in batches:
        p.begin_transaction()
        p.produce(topic, value.encode(), partition=0)
        assert p.flush(20) == 0
        if commit:
            p.commit_transaction(20)
        else:
            p.abort_transaction(20)


def kafka_python_transaction(appliance, transactional_id: str, topic: str,
                             batches: list[tuple[str, bool]]) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=appliance.bootstrap, transactional_id=transactional_id,
                      request_timeout_ms=20_000)
    try:
        p.init_transactions()
        for value, commit in batches:
            p.begin_transaction()
            p.send(topic, value.encode(), partition=0).get(timeout=20)
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close(timeout=5)


def aiokafka_transaction(appliance, transactional_id: str, topic: str,
                         batches: list[tuple[str, bool]]) -> None:
    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=appliance.bootstrap,
                             transactional_id=transactional_id, request_timeout_ms=20_000)
        await p.start()
        try:
            for value, commit in batches:
                await p.begin_transaction()
                await p.send_and_wait(topic, value.encode(), partition=0)
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(run())


WRITERS = {"confluent": confluent_transaction, "kafka-python": kafka_python_transaction,
           "aiokafka": aiokafka_transaction}


def settled_state(appliance, transactional_id: str, wanted: str) -> str:
    client = coordinator(appliance, transactional_id)
    try:
        return wait_for_state(client, transactional_id, wanted).transaction_state
    finally:
        client.close()


# -- an aborted transaction ------------------------------------------------------------------

@pytest.fixture(scope="module")
def aborted_topic(appliance, new_topic):
    """Every client writes one committed and one aborted transaction to one shared topic."""
    topic = new_topic(prefix="txn-aborted")
    for client, write in WRITERS.items():
        write(appliance, f"{client}-aborts", topic,
              [(f"{client}-committed", True), (f"{client}-aborted", False)])
        assert settled_state(appliance, f"{client}-aborts", "CompleteAbort") == "CompleteAbort"
    return topic


def test_an_aborted_transaction_is_invisible_to_read_committed_only(appliance, aborted_topic):
    committed = [f"{c}-committed" for c in CLIENTS]
    everything = [v for c in CLIENTS for v in (f"{c}-committed", f"{c}-aborted")]
    all_readers = readers(appliance, aborted_topic)
    try:
        seen = read_until(all_readers, lambda r: len(committed) if r.isolation ==
                          "read_committed" else len(everything))
    finally:
        close_all(all_readers)
    for client in CLIENTS:
        assert seen[(client, "read_committed")] == committed, client
        assert seen[(client, "read_uncommitted")] == everything, client


# -- an open transaction ---------------------------------------------------------------------

def test_an_open_transaction_holds_read_committed_at_the_lso_until_it_commits(
        appliance, new_topic):
    topic = new_topic(prefix="txn-open")
    plain = confluent_producer(appliance, None)
    plain.produce(topic, b"plain-0", partition=0)
    assert plain.flush(20) == 0
    all_readers = readers(appliance, topic)
    transactional = confluent_producer(appliance, "ck-open")
    try:
        transactional.init_transactions(20)
        transactional.begin_transaction()
        transactional.produce(topic, b"open-0", partition=0)
        transactional.produce(topic, b"open-1", partition=0)
        assert transactional.flush(20) == 0
        plain.produce(topic, b"plain-1", partition=0)  # past the LSO: held back too
        assert plain.flush(20) == 0
        everything = ["plain-0", "open-0", "open-1", "plain-1"]
        seen = read_until(all_readers, lambda r: 1 if r.isolation == "read_committed" else 4,
                          settle_s=1.5)
        for client in CLIENTS:
            assert seen[(client, "read_uncommitted")] == everything, client
            assert seen[(client, "read_committed")] == ["plain-0"], client
        transactional.commit_transaction(20)
        seen = read_until(all_readers, lambda r: 4, settle_s=0.5)
        for client in CLIENTS:
            assert seen[(client, "read_committed")] == everything, client
            assert seen[(client, "read_uncommitted")] == everything, client
    finally:
        close_all(all_readers)


# -- a transaction open past its timeout -----------------------------------------------------

def test_a_transaction_left_open_past_its_timeout_is_aborted(appliance, new_topic):
    """librdkafka's producer begins, writes and then goes silent: the coordinator aborts the
    transaction after ``transaction.timeout.ms`` (swept every 200 ms here) and bumps the
    epoch, so the producer is fenced when it comes back."""
    topic = new_topic(prefix="txn-timeout")
    hanging = confluent_producer(appliance, "ck-hanging", **{
        "transaction.timeout.ms": 2000, "message.timeout.ms": 2000,
        "socket.timeout.ms": 2000})
    hanging.init_transactions(20)
    first_epoch = describe_id(appliance, "ck-hanging").producer_epoch
    hanging.begin_transaction()
    hanging.produce(topic, b"never-committed", partition=0)
    assert hanging.flush(20) == 0
    assert describe_id(appliance, "ck-hanging").transaction_state == "Ongoing"
    started = time.monotonic()
    assert settled_state(appliance, "ck-hanging", "CompleteAbort") == "CompleteAbort"
    waited = time.monotonic() - started
    assert waited < 10
    state = describe_id(appliance, "ck-hanging")
    assert state.producer_epoch == first_epoch + 1  # the silent producer is fenced
    plain = confluent_producer(appliance, None)
    plain.produce(topic, b"after", partition=0)
    assert plain.flush(20) == 0
    all_readers = readers(appliance, topic)
    try:
        seen = read_until(all_readers, lambda r: 1 if r.isolation == "read_committed" else 2)
    finally:
        close_all(all_readers)
    for client in CLIENTS:
        assert seen[(client, "read_committed")] == ["after"], client
        assert seen[(client, "read_uncommitted")] == ["never-committed", "after"], client
    with pytest.raises(KafkaException) as raised:
        hanging.commit_transaction(20)
    assert not raised.value.args[0].retriable()


def describe_id(appliance, transactional_id: str):
    client = coordinator(appliance, transactional_id)
    try:
        return describe(client, transactional_id)
    finally:
        client.close()


# -- zombie fencing --------------------------------------------------------------------------

def test_confluent_zombie_is_fenced_and_never_visible(appliance, new_topic):
    """The zombie's open transaction is aborted by its successor's init_transactions; its
    next send and its commit fail (fatal: fenced); only the successor's records are read."""
    topic = new_topic(prefix="txn-zombie-ck")
    zombie = confluent_producer(appliance, "ck-zombie-2")
    zombie.init_transactions(20)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie-before", partition=0)
    assert zombie.flush(20) == 0
    successor = confluent_producer(appliance, "ck-zombie-2")
    successor.init_transactions(30)
    errors = []
    for attempt in (lambda: (zombie.produce(topic, b"zombie-after", partition=0),
                             zombie.flush(10)),
                    lambda: zombie.commit_transaction(20)):
        with pytest.raises(KafkaException) as raised:
            attempt()
        errors.append(raised.value.args[0])
    for error in errors:  # the send is refused (old epoch), and the commit after it
        assert error.fatal() and "fenced" in error.str().lower(), error
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=0)
    successor.commit_transaction(20)
    with pytest.raises(KafkaException):  # fatal stays fatal: nothing more is written
        zombie.begin_transaction()
        zombie.produce(topic, b"zombie-later", partition=0)
        zombie.commit_transaction(5)
    assert_read(appliance, topic, committed=["successor"],
                uncommitted=["zombie-before", "successor"])


def test_aiokafka_zombie_is_fenced_and_never_visible(appliance, new_topic):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    topic = new_topic(prefix="txn-zombie-aio")

    async def run() -> list[str]:
        def make():
            return AIOKafkaProducer(bootstrap_servers=appliance.bootstrap,
                                    transactional_id="aio-zombie", request_timeout_ms=20_000)

        zombie, successor = make(), make()
        failures = []
        await zombie.start()
        try:
            await zombie.begin_transaction()
            await zombie.send_and_wait(topic, b"zombie-before", partition=0)
            await successor.start()  # InitProducerId: the zombie's transaction is aborted
            try:
                await zombie.send_and_wait(topic, b"zombie-after", partition=0)
            except KafkaError as exc:
                failures.append(type(exc).__name__)
            try:
                await zombie.commit_transaction()
            except KafkaError as exc:
                failures.append(type(exc).__name__)
            async with successor.transaction():
                await successor.send_and_wait(topic, b"successor", partition=0)
        finally:
            await successor.stop()
            await zombie.stop()
        return failures

    failures = asyncio.run(run())
    assert failures == ["ProducerFenced", "ProducerFenced"], failures  # the send, the commit
    assert_read(appliance, topic, committed=["successor"],
                uncommitted=["zombie-before", "successor"])


def test_kafka_python_zombie_is_fenced_and_never_visible(appliance, new_topic):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    topic = new_topic(prefix="txn-zombie-kp")

    def make():
        return KafkaProducer(bootstrap_servers=appliance.bootstrap,
                             transactional_id="kp-zombie", request_timeout_ms=20_000)

    zombie = make()
    successor = None
    failures = []
    try:
        zombie.init_transactions()
        successor = make()
        successor.init_transactions()
        try:
            zombie.begin_transaction()
            zombie.send(topic, b"zombie-after", partition=0).get(timeout=20)
        except KafkaError as exc:
            failures.append(type(exc).__name__)
        try:
            zombie.commit_transaction()
        except KafkaError as exc:
            failures.append(type(exc).__name__)
        successor.begin_transaction()
        successor.send(topic, b"successor", partition=0).get(timeout=20)
        successor.commit_transaction()
    finally:
        zombie.close(timeout=5)
        if successor is not None:
            successor.close(timeout=5)
    # the send is fenced (AddPartitionsToTxn); the commit fails on the fatal state it left
    assert len(failures) == 2 and failures[0] == "ProducerFencedError", failures
    assert_read(appliance, topic, committed=["successor"], uncommitted=["successor"])


def assert_read(appliance, topic: str, *, committed: list[str], uncommitted: list[str]):
    all_readers = readers(appliance, topic)
    try:
        seen = read_until(all_readers, lambda r: len(
            committed if r.isolation == "read_committed" else uncommitted))
    finally:
        close_all(all_readers)
    for client in CLIENTS:
        assert seen[(client, "read_committed")] == committed, client
        assert seen[(client, "read_uncommitted")] == uncommitted, client


# -- aiokafka's exactly-once consume-transform-produce loop ----------------------------------

EOS_PER_PARTITION = 60


def test_aiokafka_exactly_once_loop_with_a_restart(appliance, new_topic):
    """A read_committed consumer of two input partitions and a transactional producer: each
    batch's transformed records and the group's offsets go in one transaction
    (send_offsets_to_transaction). The first run stops mid-transaction (its records and
    offsets sent, no commit: a crash); a second run with the same transactional.id and
    group fences it (the open transaction is aborted) and carries on from the committed
    offsets. The output, read_committed, holds every input record transformed exactly once,
    in each partition's order (read_uncommitted, the crashed transaction's records show:
    checked, so the crash did leave something to hide)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    source = new_topic(partitions=2, prefix="eos-in")
    sink = new_topic(partitions=2, prefix="eos-out")
    plain = confluent_producer(appliance, None)
    for i in range(EOS_PER_PARTITION):
        for partition in (0, 1):
            plain.produce(source, f"p{partition}-{i}".encode(), partition=partition)
    assert plain.flush(20) == 0
    inputs = [TopicPartition(source, 0), TopicPartition(source, 1)]

    async def run(stop_after: int | None):
        """Transactions of up to 7 records; with ``stop_after``, return after that many
        commits leaving the next transaction open (the producer, as a crashed process's,
        not stopped): the producer, for the caller to close."""
        producer = AIOKafkaProducer(bootstrap_servers=appliance.bootstrap,
                                    transactional_id="eos-aio", request_timeout_ms=20_000)
        await producer.start()  # a second run: fences the first, whose transaction aborts
        consumer = AIOKafkaConsumer(bootstrap_servers=appliance.bootstrap, group_id="eos-aio",
                                    isolation_level="read_committed",
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        consumer.assign(inputs)
        commits, idle = 0, 0
        try:
            while idle < 5:
                batches = await consumer.getmany(*inputs, timeout_ms=200, max_records=7)
                if not batches:
                    idle += 1
                    continue
                idle = 0
                await producer.begin_transaction()
                for tp, records in batches.items():
                    for record in records:
                        await producer.send(sink, b"out-" + record.value, partition=tp.partition)
                await producer.send_offsets_to_transaction(
                    {tp: records[-1].offset + 1 for tp, records in batches.items()}, "eos-aio")
                if stop_after is not None and commits == stop_after:
                    await producer.flush()
                    return producer  # crashed mid-transaction: neither committed nor aborted
                await producer.commit_transaction()
                commits += 1
        finally:
            await consumer.stop()
        await producer.stop()
        return None

    async def both():
        zombie = await run(stop_after=4)
        assert zombie is not None
        try:
            assert await run(stop_after=None) is None
        finally:
            await zombie.stop()

    asyncio.run(both())
    expected = {p: [f"out-p{p}-{i}" for i in range(EOS_PER_PARTITION)] for p in (0, 1)}
    seen = {}
    for isolation in ISOLATIONS:
        for partition in (0, 1):
            reader = Reader("confluent", appliance.bootstrap, sink, isolation)
            try:
                reader.consumer.assign([ConfluentTopicPartition(sink, partition, 0)])
                seen[(isolation, partition)] = read_until(
                    [reader], lambda r: EOS_PER_PARTITION, settle_s=0.5)[("confluent", isolation)]
            finally:
                reader.close()
    assert {p: seen[("read_committed", p)] for p in (0, 1)} == expected
    assert sum(len(seen[("read_uncommitted", p)]) for p in (0, 1)) > 2 * EOS_PER_PARTITION
