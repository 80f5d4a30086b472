"""Real transactional producers against the coordinator: confluent-kafka (librdkafka),
kafka-python and aiokafka (the coordinator's states as they see them; what consumers read is
tests/transactions/test_real_clients_txn.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer

from tests.conftest import running_appliance, topic_maker
from tests.transactions.coordinator_helpers import (
    SETTINGS,
    coordinator,
    describe,
    listed,
    wait_for_state,
)


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("txn-clients"), log_dirs=2,
                           settings=SETTINGS) as started:
        yield started


@pytest.fixture(scope="module")
def topic(appliance):
    return topic_maker(appliance.bootstrap, partitions=2, prefix="txn-clients")()


def producer(appliance, transactional_id: str) -> Producer:
    return Producer({"bootstrap.servers": appliance.bootstrap,
                     "transactional.id": transactional_id, "transaction.timeout.ms": 60_000,
                     "message.timeout.ms": 20_000, "socket.timeout.ms": 10_000})


def test_confluent_init_transactions(appliance):
    p = producer(appliance, "ck-init")
    p.init_transactions(20)
    p.begin_transaction()
    p.commit_transaction(20)  # nothing produced: librdkafka ends it locally
    client = coordinator(appliance, "ck-init")
    state = describe(client, "ck-init")
    assert (state.error_code, state.transaction_state, state.producer_epoch) == \
        (0, "Empty", 0)
    assert state.transaction_timeout_ms == 60_000
    assert "ck-init" in listed(client)
    client.close()


def test_confluent_second_producer_fences_the_first(appliance, topic):
    first = producer(appliance, "ck-fence")
    first.init_transactions(20)
    second = producer(appliance, "ck-fence")
    second.init_transactions(20)
    client = coordinator(appliance, "ck-fence")
    assert describe(client, "ck-fence").producer_epoch == 1
    client.close()
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(20)
    error = raised.value.args[0]
    assert error.fatal() and "fenced" in error.str().lower()


def test_confluent_commit_and_abort(appliance, topic):
    p = producer(appliance, "ck-commit")
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(topic, b"one", partition=0)
    p.produce(topic, b"two", partition=1)
    p.commit_transaction(20)
    client = coordinator(appliance, "ck-commit")
    assert wait_for_state(client, "ck-commit", "CompleteCommit").transaction_state == \
        "CompleteCommit"
    p.begin_transaction()
    p.produce(topic, b"three", partition=0)
    assert p.flush(20) == 0  # written, so the partition is in the transaction
    p.abort_transaction(20)
    assert wait_for_state(client, "ck-commit", "CompleteAbort").transaction_state == \
        "CompleteAbort"
    client.close()


def test_kafka_python_init_transactions(appliance):
    kafka = pytest.importorskip("kafka")
    p = kafka.KafkaProducer(bootstrap_servers=appliance.bootstrap,
                            transactional_id="kp-init", request_timeout_ms=20_000)
    try:
        p.init_transactions()
        client = coordinator(appliance, "kp-init")
        state = describe(client, "kp-init")
        assert (state.error_code, state.transaction_state) == (0, "Empty")
        client.close()
    finally:
        p.close(timeout=5)


def test_kafka_python_commit(appliance, topic):
    kafka = pytest.importorskip("kafka")
    p = kafka.KafkaProducer(bootstrap_servers=appliance.bootstrap,
                            transactional_id="kp-commit", request_timeout_ms=20_000)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"kp", partition=0)
        p.commit_transaction()
        client = coordinator(appliance, "kp-commit")
        assert wait_for_state(client, "kp-commit", "CompleteCommit").transaction_state == \
            "CompleteCommit"
        client.close()
    finally:
        p.close(timeout=5)


def test_confluent_new_producer_aborts_the_zombies_open_transaction(appliance, topic):
    zombie = producer(appliance, "ck-zombie")
    zombie.init_transactions(20)
    zombie.begin_transaction()
    zombie.produce(topic, b"from the zombie", partition=0)
    zombie.flush(20)
    successor = producer(appliance, "ck-zombie")
    successor.init_transactions(30)  # aborts the zombie's transaction first
    client = coordinator(appliance, "ck-zombie")
    state = describe(client, "ck-zombie")
    assert state.transaction_state in ("Empty", "CompleteAbort")
    assert state.producer_epoch == 2  # fenced once for the abort, once for the successor
    client.close()
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(20)
    assert raised.value.args[0].fatal()


def _aiokafka_run(appliance, transactional_id: str, topic: str | None):
    import asyncio

    aiokafka = pytest.importorskip("aiokafka")

    async def run():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=appliance.bootstrap,
                                      transactional_id=transactional_id,
                                      request_timeout_ms=20_000)
        await p.start()  # InitProducerId v0 with the transactional id
        try:
            if topic is not None:
                async with p.transaction():
                    await p.send_and_wait(topic, b"aio", partition=0)
        finally:
            await p.stop()

    asyncio.run(run())


def test_aiokafka_init(appliance):
    _aiokafka_run(appliance, "aio-init", None)
    client = coordinator(appliance, "aio-init")
    state = describe(client, "aio-init")
    assert (state.error_code, state.transaction_state) == (0, "Empty")
    client.close()


def test_aiokafka_commit(appliance, topic):
    _aiokafka_run(appliance, "aio-commit", topic)
    client = coordinator(appliance, "aio-commit")
    assert wait_for_state(client, "aio-commit", "CompleteCommit").transaction_state == \
        "CompleteCommit"
    client.close()
