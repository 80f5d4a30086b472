"""SASL_SSL: TLS first, then SASL on it. An appliance alone on a SASL_SSL listener (the SSL
listener's keystore, the SASL listener's mechanisms and users) against confluent-kafka,
kafka-python, aiokafka, kcat (tests/security_tls/real_clients.py: each administers, produces
and consumes in a group) and klog's own client, each verifying the server's certificate and
its name and logging in with PLAIN and with SCRAM-SHA-512; a wrong password is refused, and a
client that skips TLS gets nowhere."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

import pytest

import klog
from tests.conftest import REPO
from tests.security.helpers import CREDENTIALS, SCRAM_PASSWORD, SCRAM_USER
from tests.security_tls.certs import make_certs
from tests.security_tls.helpers import sasl_ssl_appliance
from tests.security_tls.real_clients import DRIVERS, Secured

pytestmark = pytest.mark.interop
TESTED = ["PLAIN", "SCRAM-SHA-512"]
_names = itertools.count()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def appliance(tmp_path_factory, certs):
    started = sasl_ssl_appliance(tmp_path_factory.mktemp("sasl-ssl"), certs).start()
    yield started
    started.stop()


def klog_options(certs, mechanism, **changes) -> dict:
    user, password = CREDENTIALS[mechanism]
    return {"security_protocol": "SASL_SSL", "ssl_cafile": str(certs.ca),
            "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password, **changes}


@pytest.mark.parametrize("mechanism", TESTED)
@pytest.mark.parametrize("client", sorted(DRIVERS))
def test_real_clients_administer_produce_and_consume_in_a_group(appliance, certs, client,
                                                                 mechanism):
    """Each real client, verifying the certificate and its name, logged in by `mechanism`."""
    user, password = CREDENTIALS[mechanism]
    secured = Secured("SASL_SSL", certs.ca, mechanism=mechanism, user=user, password=password)
    DRIVERS[client](appliance.bootstrap, secured,
                    f"acc-{client}-{mechanism.lower()}-{next(_names)}")


@pytest.mark.parametrize("mechanism", TESTED)
def test_klog_client(appliance, certs, mechanism):
    options = klog_options(certs, mechanism)
    topic = f"sasl-ssl-klog-{next(_names)}"
    with klog.Admin(appliance.bootstrap, **options) as admin:
        admin.create_topic(topic, 2)
    with klog.Producer(bootstrap_servers=appliance.bootstrap, **options) as producer:
        for i in range(100):
            producer.send(topic, b"v%d" % i)
        producer.flush()
    consumer = klog.Consumer(bootstrap_servers=appliance.bootstrap, group_id=f"g-{topic}",
                             auto_offset_reset="earliest", **options)
    consumer.subscribe([topic])
    got, deadline = [], time.monotonic() + 60
    while len(got) < 100 and time.monotonic() < deadline:
        got += [r.value for records in consumer.poll(500).values() for r in records]
    consumer.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(100))


def test_a_wrong_password_is_refused(appliance, certs):
    with pytest.raises(klog.errors.KafkaError) as refused:
        klog.Admin(appliance.bootstrap,
                   **klog_options(certs, "SCRAM-SHA-512", sasl_plain_password="no"))
    assert refused.value.code == klog.errors.ErrorCode.SASL_AUTHENTICATION_FAILED


def test_sasl_without_tls_gets_nowhere(appliance):
    user, password = CREDENTIALS["PLAIN"]
    with pytest.raises(klog.errors.KlogError):
        klog.Admin(appliance.bootstrap, security_protocol="SASL_PLAINTEXT",
                   sasl_mechanism="PLAIN", sasl_plain_username=user,
                   sasl_plain_password=password, request_timeout_ms=5000)


def test_klog_acls_over_sasl_ssl(appliance, certs, tmp_path):
    """`klog acls` logs in over SASL_SSL; without an authorizer the broker answers
    SECURITY_DISABLED (which needs a request past authentication)."""
    secret = tmp_path / "pw"
    secret.write_text(SCRAM_PASSWORD + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "klog_cli.main", "acls", "list", "--bootstrap-server",
         appliance.bootstrap, "--security-protocol", "SASL_SSL", "--ssl-cafile", str(certs.ca),
         "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-plain-username", SCRAM_USER,
         "--sasl-plain-password-file", str(secret)],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "SECURITY_DISABLED" in result.stdout + result.stderr


def test_the_protocol_is_read_in_any_case(appliance, certs):
    """As the Java client and librdkafka read `security.protocol` (kafka-python compares in
    capitals and would take "sasl_ssl" for plaintext): the Admin, Producer and Consumer alike."""
    options = klog_options(certs, "SCRAM-SHA-512", security_protocol="sasl_ssl")
    with klog.Admin(appliance.bootstrap, **options) as admin:
        admin.create_topic("any-case", 1)
    with klog.Producer(bootstrap_servers=appliance.bootstrap, **options) as producer:
        producer.send("any-case", b"x").result(timeout=20)
    assert klog.security.ClientSecurity("Sasl_Ssl", "PLAIN", "u", "p").security_protocol == \
        "SASL_SSL"
