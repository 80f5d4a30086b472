"""A Fetch of several MB across batches over TLS is, byte for byte, the same Fetch over
PLAINTEXT (sendfile): the records are read from the segment and encrypted in pieces, none
lost, reordered or repeated. Two appliances (one per listener kind: an appliance serves one
listener), given the same batches; also a TLS client on the plaintext port is closed."""

from __future__ import annotations

import os
import ssl

import pytest

from klog.protocol.apis import api_versions, fetch, produce
from klog.protocol.records import build_batch
from tests.conftest import Appliance
from tests.security_tls.certs import make_certs
from tests.security_tls.helpers import TlsRawClient, client_context, tls_appliance

pytestmark = pytest.mark.interop
BATCHES = 24
RECORDS_PER_BATCH = 8
VALUE_BYTES = 40_000  # ~320 KB a batch, ~7.7 MB in all


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def appliances(tmp_path_factory, certs):
    tls = tls_appliance(tmp_path_factory.mktemp("tls"), certs)
    plain = Appliance(tmp_path_factory.mktemp("plain"))
    tls.start()
    try:
        plain.start()
        try:
            yield tls, plain
        finally:
            plain.stop()
    finally:
        tls.stop()


def batches():
    rng = os.urandom  # incompressible values; the same bytes go to both appliances
    return [build_batch([(1_700_000_000_000 + b, f"k{b}-{i}".encode(), rng(VALUE_BYTES), [])
                         for i in range(RECORDS_PER_BATCH)]) for b in range(BATCHES)]


def produce_all(client, topic, data):
    for batch in data:
        answer = client.call(produce, 8, transactional_id=None, acks=-1, timeout_ms=10000,
                             topic_data=[produce.TopicProduceData(name=topic, partition_data=[
                                 produce.PartitionProduceData(index=0, records=batch)])])
        assert answer.responses[0].partition_responses[0].error_code == 0


def fetch_all(client, topic, max_bytes):
    answer = client.call(fetch, 11, replica_id=-1, max_wait_ms=0, min_bytes=1,
                         max_bytes=max_bytes, isolation_level=0, session_id=0,
                         session_epoch=-1, topics=[fetch.FetchTopic(topic=topic, partitions=[
                             fetch.FetchPartition(partition=0, current_leader_epoch=-1,
                                                  fetch_offset=0, log_start_offset=-1,
                                                  partition_max_bytes=max_bytes)])],
                         forgotten_topics_data=[], rack_id="")
    partition = answer.responses[0].partitions[0]
    assert partition.error_code == 0
    return partition.high_watermark, bytes(partition.records)


def test_a_large_fetch_over_tls_equals_the_plaintext_one(appliances, certs):
    import klog

    tls, plain = appliances
    data = batches()
    with klog.Admin(plain.bootstrap) as admin:
        admin.create_topic("large", 1)
    with klog.Admin(tls.bootstrap, security_protocol="SSL", ssl_cafile=str(certs.ca)) as admin:
        admin.create_topic("large", 1)
    plain_client = TlsRawClient(plain.port, None)
    tls_client = TlsRawClient(tls.port, client_context(certs))
    try:
        produce_all(plain_client, "large", data)
        produce_all(tls_client, "large", data)
        over_plaintext = fetch_all(plain_client, "large", 64 << 20)
        over_tls = fetch_all(tls_client, "large", 64 << 20)
    finally:
        plain_client.close()
        tls_client.close()
    assert over_plaintext[0] == over_tls[0] == BATCHES * RECORDS_PER_BATCH
    assert len(over_tls[1]) > 5 << 20
    assert over_tls[1] == over_plaintext[1]
    # and the records are the ones produced (the broker sets offsets and the leader epoch)
    assert over_tls[1][-VALUE_BYTES - 200:].count(data[-1][-VALUE_BYTES:]) == 1


def test_a_tls_client_on_the_plaintext_port_is_closed_and_others_are_served(appliances,
                                                                             certs):
    _, plain = appliances
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        TlsRawClient(plain.port, client_context(certs))
    client = TlsRawClient(plain.port, None)
    assert client.call(api_versions, 0).error_code == 0
    client.close()
