"""SIGHUP re-reads the keystore: new connections get the new certificate on every worker, open
ones go on; files that no longer load keep the running certificate, with an error logged."""

from __future__ import annotations

import os
import shutil
import signal

import pytest

from klog.protocol.apis import api_versions
from tests.polling import wait_until
from tests.security_tls.certs import make_certs, server_keystore
from tests.security_tls.helpers import TlsRawClient, client_context, tls_appliance

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def serial_at(port, certs) -> int:
    client = TlsRawClient(port, client_context(certs))
    try:
        assert client.call(api_versions, 0).error_code == 0
        return client.peer_serial()
    finally:
        client.close()


def test_sighup_serves_the_replaced_certificate(tmp_path, certs):
    live = certs.directory / "live.keystore.pem"
    shutil.copy(certs.server_keystore, live)
    appliance = tls_appliance(tmp_path / "appliance", certs, log_dirs=2, keystore=live)
    appliance.start()
    try:
        assert [serial_at(p, certs) for p in appliance.ports()] == [1001, 1001]
        before = TlsRawClient(appliance.port, client_context(certs))

        renewed, _ = server_keystore(certs.directory, "renewed", serial=1002)
        os.replace(renewed, live)
        appliance.process.send_signal(signal.SIGHUP)
        wait_until(lambda: [serial_at(p, certs) for p in appliance.ports()] == [1002, 1002],
                   15, "the new certificate on every worker")
        assert before.call(api_versions, 0).error_code == 0  # the open connection goes on
        before.close()

        live.write_text("-----BEGIN PRIVATE KEY-----\ntruncated\n")
        appliance.process.send_signal(signal.SIGHUP)
        wait_until(lambda: appliance.log_text().count("TLS reload failed") >= 2, 15,
                   "each worker's reload error")
        assert [serial_at(p, certs) for p in appliance.ports()] == [1002, 1002]
    finally:
        appliance.stop()
