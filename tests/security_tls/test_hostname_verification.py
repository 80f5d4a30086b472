"""The clients verify the server's certificate INCLUDING its name: an appliance whose
certificate, signed by the CA the clients trust, names another host (broker.other.example)
is refused by each real client dialling 127.0.0.1 with hostname verification on, and
accepted by the same client with it off (so the name, not the chain, is what is refused)."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from tests.conftest import require_binary
from tests.security_tls.certs import make_certs, server_keystore
from tests.security_tls.helpers import tls_appliance

pytestmark = pytest.mark.interop
OTHER_NAME = "DNS:broker.other.example"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def appliance(tmp_path_factory, certs):
    keystore, _ = server_keystore(certs.directory, "other", serial=1002, san=OTHER_NAME)
    started = tls_appliance(tmp_path_factory.mktemp("other-name"), certs, keystore=keystore)
    started.start()
    yield started
    started.stop()


def confluent_connects(appliance, certs, verify_name: bool) -> bool:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": appliance.bootstrap, "security.protocol": "SSL",
                         "ssl.ca.location": str(certs.ca),
                         "ssl.endpoint.identification.algorithm":
                             "https" if verify_name else "none"})
    try:
        return bool(admin.list_topics(timeout=5).brokers)
    except KafkaException:
        return False


def kafka_python_connects(appliance, certs, verify_name: bool) -> bool:
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError, KafkaTimeoutError

    try:
        consumer = KafkaConsumer(bootstrap_servers=appliance.bootstrap, security_protocol="SSL",
                                 ssl_cafile=str(certs.ca), ssl_check_hostname=verify_name,
                                 request_timeout_ms=5000, bootstrap_timeout_ms=5000)
    except KafkaTimeoutError:  # "Unable to bootstrap": no broker it would talk to
        return False
    try:
        consumer.topics()
        return True
    except KafkaError:
        return False
    finally:
        consumer.close()


def aiokafka_connects(appliance, certs, verify_name: bool) -> bool:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError
    from aiokafka.helpers import create_ssl_context

    async def run():
        context = create_ssl_context(cafile=str(certs.ca))
        context.check_hostname = verify_name
        producer = AIOKafkaProducer(bootstrap_servers=appliance.bootstrap,
                                    security_protocol="SSL", ssl_context=context,
                                    request_timeout_ms=5000)
        try:
            await producer.start()
        except KafkaConnectionError:
            return False
        finally:
            await producer.stop()
        return True

    return asyncio.run(run())


def kcat_connects(appliance, certs, verify_name: bool) -> bool:
    result = subprocess.run(
        [require_binary("kcat"), "-b", appliance.bootstrap, "-L", "-m", "5",
         "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={certs.ca}",
         "-X", f"ssl.endpoint.identification.algorithm={'https' if verify_name else 'none'}"],
        capture_output=True, text=True, timeout=60)
    return result.returncode == 0


def klog_connects(appliance, certs, verify_name: bool) -> bool:
    import klog
    from klog.errors import BrokerUnavailableError

    try:
        klog.Admin(appliance.bootstrap, security_protocol="SSL", ssl_cafile=str(certs.ca),
                   ssl_check_hostname=verify_name, request_timeout_ms=5000).close()
        return True
    except BrokerUnavailableError as exc:
        assert "mismatch" in str(exc)  # Python's "IP address mismatch, certificate is not ..."
        return False


CLIENTS = {"confluent-kafka": confluent_connects, "kafka-python": kafka_python_connects,
           "aiokafka": aiokafka_connects, "kcat": kcat_connects, "klog": klog_connects}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_certificate_for_another_name_is_refused(appliance, certs, client):
    assert not CLIENTS[client](appliance, certs, verify_name=True)
    assert CLIENTS[client](appliance, certs, verify_name=False)
