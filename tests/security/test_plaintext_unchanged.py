"""A PLAINTEXT listener is served as before SASL existed: no authentication, requests from
the first byte; the SASL APIs are advertised (as Kafka does on every listener) and answered
ILLEGAL_SASL_STATE, as Kafka answers them on a PLAINTEXT listener."""

from __future__ import annotations

import pytest

from klog.protocol.apis import api_versions, metadata, sasl_authenticate, sasl_handshake
from klog.protocol.error_codes import ErrorCode
from tests.conftest import running_appliance
from tests.worker.raw import RawClient


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("plaintext"),
                           settings={"sasl.enabled.mechanisms": "PLAIN"}) as started:
        yield started


def test_requests_need_no_authentication(appliance):
    client = RawClient(appliance.port)
    assert client.call(metadata, 1, topics=[]).brokers
    client.close()


def test_sasl_requests_are_an_illegal_state(appliance):
    client = RawClient(appliance.port)
    keys = {k.api_key for k in client.call(api_versions, 0).api_keys}
    assert {17, 36} <= keys
    assert (client.call(sasl_handshake, 1, mechanism="PLAIN").error_code
            == ErrorCode.ILLEGAL_SASL_STATE)
    assert (client.call(sasl_authenticate, 1, auth_bytes=b"\0a\0b").error_code
            == ErrorCode.ILLEGAL_SASL_STATE)
    assert client.call(metadata, 1, topics=[]).brokers
    client.close()
