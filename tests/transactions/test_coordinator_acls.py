"""Authorization of the transaction APIs with an authorizer, as Kafka: DESCRIBE on the
TRANSACTIONAL_ID for FindCoordinator and DescribeTransactions (and ListTransactions shows only
those), WRITE on it for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn. The
PLAINTEXT principal is User:ANONYMOUS; it may do everything on the topic, and WRITE (which
implies DESCRIBE) only on transactional id ``tx-ok``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from klog.protocol.apis import (
    add_offsets_to_txn,
    describe_transactions,
    end_txn,
    find_coordinator,
    init_producer_id,
)
from klog.protocol.error_codes import ErrorCode
from tests.conftest import REPO, Appliance
from tests.transactions.coordinator_helpers import SETTINGS, add_partitions, coordinator, listed
from tests.worker.raw import RawClient

E = ErrorCode


def _acl(config, *args, principal="User:ANONYMOUS"):
    done = subprocess.run([sys.executable, "-m", "klog_cli.main", "acls", "add",
                           "--allow-principal", principal, *args, "--config",
                           str(config)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    configured = Appliance(tmp_path_factory.mktemp("txn-acls"), log_dirs=2, settings={
        **SETTINGS, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    _acl(configured.config, "--operation", "All", "--topic", "t")
    _acl(configured.config, "--operation", "All", "--group", "g")
    _acl(configured.config, "--operation", "All", "--cluster")
    _acl(configured.config, "--operation", "Write", "--transactional-id", "tx-ok")
    started = configured.start()
    yield started
    started.stop()


def test_find_coordinator_needs_describe(appliance):
    client = RawClient(appliance.port)
    refused = client.call(find_coordinator, 2, key="tx-denied", key_type=1)
    assert refused.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert client.call(find_coordinator, 2, key="tx-ok", key_type=1).error_code == 0
    client.close()


def test_write_on_the_id_for_every_transaction_api(appliance):
    ok = coordinator(appliance, "tx-ok")
    pid = ok.call(init_producer_id, 4, transactional_id="tx-ok", transaction_timeout_ms=60_000,
                  producer_id=-1, producer_epoch=-1)
    assert pid.error_code == 0
    client = RawClient(appliance.port)
    denied = client.call(init_producer_id, 4, transactional_id="tx-denied",
                         transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1)
    assert denied.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert add_partitions(client, "tx-denied", 1, 0, {"t": [0]}) == \
        {("t", 0): E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    answer = client.call(add_offsets_to_txn, 0, transactional_id="tx-denied", producer_id=1,
                         producer_epoch=0, group_id="g")
    assert answer.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    answer = client.call(end_txn, 0, transactional_id="tx-denied", producer_id=1,
                         producer_epoch=0, committed=True)
    assert answer.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    answer = client.call(describe_transactions, 0, transactional_ids=["tx-denied"])
    assert answer.transaction_states[0].error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # a topic the principal may not write: TOPIC_AUTHORIZATION_FAILED
    assert add_partitions(ok, "tx-ok", pid.producer_id, 0, {"other": [0]}) == \
        {("other", 0): E.TOPIC_AUTHORIZATION_FAILED}
    answer = ok.call(add_offsets_to_txn, 0, transactional_id="tx-ok",
                     producer_id=pid.producer_id, producer_epoch=0, group_id="not-g")
    assert answer.error_code == E.GROUP_AUTHORIZATION_FAILED
    assert "tx-ok" in listed(ok)
    client.close()
    ok.close()
