"""Markers on a SASL_PLAINTEXT appliance with an authorizer: the coordinator dials leaders
with the inter-broker credentials (``sasl.mechanism.inter.broker.protocol`` and the JAAS
entry's ``admin``, a super user, which has the ClusterAction WriteTxnMarkers needs), so
alice's transaction completes."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.security.helpers import PLAIN_USERS, confluent_conf, sasl_appliance
from tests.transactions.coordinator_helpers import SETTINGS
from tests.transactions.test_coordinator_acls import _acl


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    configured = sasl_appliance(tmp_path_factory.mktemp("txn-sasl"), log_dirs=2, **{
        **SETTINGS, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin", "sasl.mechanism.inter.broker.protocol": "PLAIN"})
    for args in (["--operation", "Write", "--operation", "Describe", "--topic", "t"],
                 ["--operation", "Write", "--transactional-id", "alice-tx"]):
        _acl(configured.config, *args, principal="User:alice")
    started = configured.start()
    admin = AdminClient(confluent_conf(started.bootstrap, "PLAIN", "admin",
                                       PLAIN_USERS["admin"]))
    admin.create_topics([NewTopic("t", 2, 1)])["t"].result(30)
    yield started
    started.stop()


def test_alices_transaction_completes(appliance):
    conf = confluent_conf(appliance.bootstrap, "PLAIN", "alice", PLAIN_USERS["alice"])
    p = Producer({**conf, "transactional.id": "alice-tx", "message.timeout.ms": 20_000})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce("t", b"by alice", partition=1)
    p.commit_transaction(20)
    # a second transaction begins only once the first is complete (else
    # CONCURRENT_TRANSACTIONS, retried by librdkafka): its commit shows the markers landed
    p.begin_transaction()
    p.produce("t", b"again", partition=0)
    p.commit_transaction(20)
