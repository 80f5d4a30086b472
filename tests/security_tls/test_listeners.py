"""Several listeners on one appliance: PLAINTEXT and SASL_SSL served together by every worker
(each on its listener's port + the worker's index), each client answered with the ports of
the listener it came in on, so a SASL_SSL client is never sent to the PLAINTEXT port."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import REPO, Appliance, free_ports
from tests.security.helpers import SCRAM_PASSWORD, SCRAM_USER
from tests.security_tls.certs import KEY_PASSWORD, make_certs

pytestmark = pytest.mark.interop
WORKERS = 2


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def appliance(tmp_path_factory, certs):
    workdir = tmp_path_factory.mktemp("listeners")
    port = free_ports(WORKERS)
    started = Appliance(workdir, port=port, log_dirs=WORKERS, settings={
        "listeners": "CLIENT://127.0.0.1:{port},SECURE://127.0.0.1:{port2}",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,SECURE:SASL_SSL",
        "listener.name.secure.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        # the keystore is the SASL_SSL listener's own (Kafka's per-listener form)
        "listener.name.secure.ssl.keystore.location": str(certs.server_keystore),
        "listener.name.secure.ssl.key.password": KEY_PASSWORD,
        "group.initial.rebalance.delay.ms": "0"})
    secret = workdir / "scram-password"
    secret.write_text(SCRAM_PASSWORD + "\n")
    subprocess.run([sys.executable, "-m", "klog_cli.main", "users", "add", SCRAM_USER,
                    "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret),
                    "--config", str(started.config)],
                   cwd=REPO, check=True, capture_output=True, timeout=60)
    started.start()
    yield started
    started.stop()


def plaintext(appliance) -> dict:
    return {"bootstrap.servers": appliance.bootstrap}


def secure(appliance, certs) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{appliance.port2}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs.ca), "ssl.endpoint.identification.algorithm": "https",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": SCRAM_USER,
            "sasl.password": SCRAM_PASSWORD}


def test_each_client_is_given_its_own_listeners_ports(appliance, certs):
    on_plaintext = AdminClient(plaintext(appliance)).list_topics(timeout=10)
    on_secure = AdminClient(secure(appliance, certs)).list_topics(timeout=10)
    assert sorted(b.port for b in on_plaintext.brokers.values()) == \
        [appliance.port + i for i in range(WORKERS)]
    assert sorted(b.port for b in on_secure.brokers.values()) == \
        [appliance.port2 + i for i in range(WORKERS)]


def test_produce_on_one_listener_consume_in_a_group_on_the_other(appliance, certs):
    admin = AdminClient(secure(appliance, certs))
    admin.create_topics([NewTopic("both", num_partitions=4, replication_factor=1)])[
        "both"].result(timeout=10)
    producer = Producer({**secure(appliance, certs), "acks": "all"})
    for i in range(100):
        producer.produce("both", value=f"m{i}".encode(), key=str(i).encode())
    assert producer.flush(15) == 0
    for settings in (plaintext(appliance), secure(appliance, certs)):
        consumer = Consumer({**settings, "group.id": f"g-{settings.get('security.protocol')}",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["both"])
        seen = set()
        for _ in range(200):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.add(message.value())
            if len(seen) == 100:
                break
        consumer.close()
        assert seen == {f"m{i}".encode() for i in range(100)}


def test_the_plaintext_port_does_not_speak_tls_and_the_secure_one_needs_it(appliance, certs):
    wrong = {**secure(appliance, certs), "bootstrap.servers": appliance.bootstrap,
             "socket.timeout.ms": 3000}
    with pytest.raises(Exception):  # noqa: B017 - librdkafka's timeout, whatever its name
        AdminClient(wrong).list_topics(timeout=4)
    bare = {"bootstrap.servers": f"127.0.0.1:{appliance.port2}", "socket.timeout.ms": 3000}
    with pytest.raises(Exception):  # noqa: B017
        AdminClient(bare).list_topics(timeout=4)
