"""The ``klog`` data source reads a topic of an appliance that serves SASL_SSL only: its
security options reach the lookups (consumer and Admin, on the driver) and the executors'
consumers, and the server's certificate is verified."""

from __future__ import annotations

import pytest

import klog
from tests.security.helpers import SCRAM_PASSWORD, SCRAM_USER
from tests.security_tls.certs import make_certs
from tests.security_tls.helpers import sasl_ssl_appliance

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory, certs):
    started = sasl_ssl_appliance(tmp_path_factory.mktemp("pipeline-sasl-ssl"), certs).start()
    yield started
    started.stop()


def test_a_batch_read_over_sasl_ssl_with_scram(spark, secured, certs):
    options = {"security_protocol": "SASL_SSL", "ssl_cafile": str(certs.ca),
               "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": SCRAM_USER,
               "sasl_plain_password": SCRAM_PASSWORD}
    with klog.Admin(secured.bootstrap, **options) as admin:
        admin.create_topic("secured-clicks", 3)
    with klog.Producer(bootstrap_servers=secured.bootstrap, **options) as producer:
        for i in range(300):
            producer.send("secured-clicks", b"v%d" % i, partition=i % 3)
        producer.flush(30)
    reader = (spark.read.format("klog").option("bootstrap.servers", secured.bootstrap)
              .option("subscribePattern", "secured-.*"))  # the pattern asks the Admin
    for key, value in options.items():
        reader = reader.option(f"kafka.{key.replace('_', '.')}" if key.startswith("sasl")
                               else key, value)  # both spellings
    rows = reader.load().collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(b"v%d" % i for i in range(300))
    assert {r.topic for r in rows} == {"secured-clicks"}
