"""ssl.client.auth=required: a client certificate signed by the truststore's CA is the
connection's principal (Kafka's `User:` + the RFC 2253 subject, seen in the appliance's log);
a client without one is refused and the worker goes on serving the others. Each real client
(tests/security_tls/real_clients.py) administers, produces and consumes in a group with its
certificate, verifying the server's and its name."""

from __future__ import annotations

import ssl

import pytest

from klog.protocol.apis import api_versions
from tests.polling import wait_until
from tests.security_tls.certs import make_certs
from tests.security_tls.helpers import TlsRawClient, client_context, tls_appliance
from tests.security_tls.real_clients import DRIVERS, Secured

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def appliance(tmp_path_factory, certs):
    started = tls_appliance(tmp_path_factory.mktemp("mtls-appliance"), certs,
                            **{"ssl.client.auth": "required",
                               "ssl.truststore.type": "PEM",
                               "ssl.truststore.location": str(certs.ca)})
    started.start()
    yield started
    started.stop()


def test_a_client_certificate_is_the_principal(appliance, certs):
    import klog

    tls = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca),
           "ssl_certfile": str(certs.client_cert), "ssl_keyfile": str(certs.client_key)}
    with klog.Admin(appliance.bootstrap, **tls) as admin:
        admin.create_topic("mtls", 1)
    with klog.Producer(bootstrap_servers=appliance.bootstrap, **tls) as producer:
        producer.send("mtls", value=b"signed").result(timeout=20)
    principal = f"User:{certs.client_subject}"
    assert principal == "User:CN=alice,OU=eng,O=Example\\, Inc.,C=US"
    wait_until(lambda: f"authenticated as {principal}" in appliance.log_text(), 10,
               "the principal in the log")


def test_confluent_kafka_with_a_client_certificate(appliance, certs):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": appliance.bootstrap, "security.protocol": "SSL",
                         "ssl.ca.location": str(certs.ca),
                         "ssl.certificate.location": str(certs.client_cert),
                         "ssl.key.location": str(certs.client_key),
                         "ssl.endpoint.identification.algorithm": "https"})
    producer.produce("mtls-confluent", value=b"x")
    assert producer.flush(30) == 0


def test_a_client_without_a_certificate_is_refused_and_others_are_served(appliance, certs):
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        client = TlsRawClient(appliance.port, client_context(certs))
        client.call(api_versions, 0)  # TLS 1.3: the refusal arrives after the handshake
    client = TlsRawClient(appliance.port, client_context(certs, with_cert=True))
    assert client.call(api_versions, 0).error_code == 0
    client.close()


@pytest.mark.parametrize("client", sorted(DRIVERS))
def test_real_clients_with_a_client_certificate(appliance, certs, client):
    secured = Secured("SSL", certs.ca, cert=certs.client_cert, key=certs.client_key)
    DRIVERS[client](appliance.bootstrap, secured, f"mtls-{client}")
