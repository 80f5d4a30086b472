"""The transaction coordinator over the wire, with raw requests: what it owns before the
partition side (markers written by leaders) exists. Until a leader serves WriteTxnMarkers,
a decided transaction stays in PrepareCommit/PrepareAbort while its markers are retried."""

from __future__ import annotations

import pytest

from klog.protocol.apis import add_offsets_to_txn, find_coordinator
from klog.protocol.error_codes import ErrorCode
from tests.conftest import running_appliance, topic_maker
from tests.transactions.coordinator_helpers import (
    SETTINGS,
    add_partitions,
    coordinator,
    describe,
    end,
    init,
    listed,
    wait_for_state,
)
from tests.worker.raw import RawClient

E = ErrorCode


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("txn-coordinator"), log_dirs=2,
                           settings=SETTINGS) as started:
        yield started


@pytest.fixture(scope="module")
def topic(appliance):
    return topic_maker(appliance.bootstrap, partitions=3, prefix="txn")()


def test_find_coordinator_key_type_1_creates_the_topic(appliance):
    client = coordinator(appliance, "tx-find")
    client.close()
    bootstrap = RawClient(appliance.port)
    answer = bootstrap.call(find_coordinator, 2, key="", key_type=1)
    assert answer.error_code == E.INVALID_REQUEST
    answer = bootstrap.call(find_coordinator, 2, key="x", key_type=7)
    assert answer.error_code == E.INVALID_REQUEST
    bootstrap.close()


def test_init_gives_an_id_then_bumps_its_epoch(appliance):
    client = coordinator(appliance, "tx-init")
    first = init(client, "tx-init")
    assert first.error_code == 0 and first.producer_id >= 0 and first.producer_epoch == 0
    second = init(client, "tx-init")
    assert (second.error_code, second.producer_id, second.producer_epoch) == \
        (0, first.producer_id, 1)
    state = describe(client, "tx-init")
    assert (state.transaction_state, state.producer_epoch) == ("Empty", 1)
    # KIP-360: the known pair may bump; an old one is fenced
    bumped = init(client, "tx-init", producer_id=first.producer_id, producer_epoch=1)
    assert (bumped.error_code, bumped.producer_epoch) == (0, 2)
    old = init(client, "tx-init", producer_id=first.producer_id, producer_epoch=0)
    assert old.error_code == E.PRODUCER_FENCED
    old = init(client, "tx-init", version=3, producer_id=first.producer_id, producer_epoch=0)
    assert old.error_code == E.INVALID_PRODUCER_EPOCH
    client.close()


def test_timeout_over_the_maximum(appliance):
    client = coordinator(appliance, "tx-timeout-max")
    answer = init(client, "tx-timeout-max", timeout_ms=900_001)
    assert answer.error_code == E.INVALID_TRANSACTION_TIMEOUT
    client.close()


def test_not_the_coordinator(appliance):
    client = coordinator(appliance, "tx-elsewhere")
    other = [p for p in appliance.ports() if p != client.sock.getpeername()[1]][0]
    client.close()
    wrong = RawClient(other)
    assert init(wrong, "tx-elsewhere").error_code == E.NOT_COORDINATOR
    wrong.close()


def test_add_partitions_and_end_txn(appliance, topic):
    client = coordinator(appliance, "tx-commit")
    pid = init(client, "tx-commit")
    assert end(client, "tx-commit", pid.producer_id, 0, True) == E.INVALID_TXN_STATE
    errors = add_partitions(client, "tx-commit", pid.producer_id, 0, {topic: [0, 2]})
    assert errors == {(topic, 0): E.NONE, (topic, 2): E.NONE}
    state = describe(client, "tx-commit")
    assert state.transaction_state == "Ongoing"
    assert [(t.topic, sorted(t.partitions)) for t in state.topics] == [(topic, [0, 2])]
    assert listed(client, states=["Ongoing"])["tx-commit"] == "Ongoing"
    assert end(client, "tx-commit", pid.producer_id, 0, True) == E.NONE
    state = describe(client, "tx-commit")
    assert state.transaction_state in ("PrepareCommit", "CompleteCommit")
    # what EndTxn answers while it completes is the state machine's (test_txn_state_machine);
    # here: it completes, and then a repeated commit is a retry, an abort invalid
    assert wait_for_state(client, "tx-commit", "CompleteCommit").transaction_state == \
        "CompleteCommit"
    assert end(client, "tx-commit", pid.producer_id, 0, True) == E.NONE
    assert end(client, "tx-commit", pid.producer_id, 0, False) == E.INVALID_TXN_STATE
    client.close()


def test_unknown_partitions_and_the_others_not_attempted(appliance, topic):
    client = coordinator(appliance, "tx-unknown")
    pid = init(client, "tx-unknown")
    errors = add_partitions(client, "tx-unknown", pid.producer_id, 0,
                            {topic: [0, 99], "no-such-topic": [0]})
    assert errors == {(topic, 0): E.OPERATION_NOT_ATTEMPTED,
                      (topic, 99): E.UNKNOWN_TOPIC_OR_PARTITION,
                      ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert describe(client, "tx-unknown").transaction_state == "Empty"
    client.close()


def test_an_old_epoch_is_fenced(appliance, topic):
    client = coordinator(appliance, "tx-fence")
    old = init(client, "tx-fence")
    new = init(client, "tx-fence")
    assert new.producer_epoch == old.producer_epoch + 1
    for version, code in [(3, E.PRODUCER_FENCED), (1, E.INVALID_PRODUCER_EPOCH)]:
        assert add_partitions(client, "tx-fence", old.producer_id, old.producer_epoch,
                              {topic: [0]}, version=version) == {(topic, 0): code}
        assert end(client, "tx-fence", old.producer_id, old.producer_epoch, True,
                   version=version) == code
    assert add_partitions(client, "tx-fence", 123456, 0, {topic: [0]}) == \
        {(topic, 0): E.INVALID_PRODUCER_ID_MAPPING}
    client.close()


def test_add_offsets_adds_the_groups_partition(appliance):
    client = coordinator(appliance, "tx-offsets")
    pid = init(client, "tx-offsets")
    answer = client.call(add_offsets_to_txn, 0, transactional_id="tx-offsets",
                         producer_id=pid.producer_id, producer_epoch=0, group_id="g-1")
    assert answer.error_code == 0
    state = describe(client, "tx-offsets")
    assert state.transaction_state == "Ongoing"
    assert [t.topic for t in state.topics] == ["__consumer_offsets"]
    client.close()


def test_init_fences_an_open_transaction_by_aborting_it(appliance, topic):
    client = coordinator(appliance, "tx-reinit")
    old = init(client, "tx-reinit")
    add_partitions(client, "tx-reinit", old.producer_id, 0, {topic: [1]})
    answer = init(client, "tx-reinit")
    assert answer.error_code == E.CONCURRENT_TRANSACTIONS  # the open one is aborted first
    state = describe(client, "tx-reinit")
    assert state.transaction_state in ("PrepareAbort", "CompleteAbort")
    assert state.producer_epoch == 1
    assert end(client, "tx-reinit", old.producer_id, 0, True) == E.PRODUCER_FENCED
    client.close()


def test_a_transaction_open_past_its_timeout_is_aborted(appliance, topic):
    client = coordinator(appliance, "tx-hanging")
    pid = init(client, "tx-hanging", timeout_ms=500)
    add_partitions(client, "tx-hanging", pid.producer_id, 0, {topic: [0]})
    state = wait_for_state(client, "tx-hanging", "CompleteAbort", timeout_s=10)
    assert state.transaction_state == "CompleteAbort"
    assert state.producer_epoch == 1  # the producer is fenced
    assert end(client, "tx-hanging", pid.producer_id, 0, True) == E.PRODUCER_FENCED
    client.close()


def test_describe_unknown_and_list_filters(appliance):
    client = coordinator(appliance, "tx-never-seen")
    state = describe(client, "tx-never-seen")
    assert state.error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    answer_states = listed(client, states=["Bogus"])
    assert answer_states == {}
    client.close()
