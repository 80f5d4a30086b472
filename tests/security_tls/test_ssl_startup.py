"""An SSL listener that cannot start stops the appliance with one line naming the key or the
file, not a traceback (no appliance is left running)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, free_ports
from tests.security_tls.certs import make_certs
from tests.security_tls.helpers import tls_settings


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def start(tmp_path, settings) -> subprocess.CompletedProcess:
    config = tmp_path / "server.properties"
    settings = {"broker.id": "0", "log.dirs": str(tmp_path / "disk0"), **settings}
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return subprocess.run([sys.executable, "-m", "klog_cli.main", "appliance", "run",
                           "--config", str(config)], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_no_keystore(tmp_path, certs):
    settings = tls_settings(certs, free_ports(1))
    del settings["ssl.keystore.location"]
    result = start(tmp_path, settings)
    assert result.returncode == 2
    assert "ssl.keystore.location is not set" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_jks_keystore(tmp_path, certs):
    result = start(tmp_path, tls_settings(certs, free_ports(1), **{"ssl.keystore.type": "JKS"}))
    assert result.returncode == 2
    assert "'ssl.keystore.type'" in result.stderr and "PEM" in result.stderr


def test_a_wrong_key_password(tmp_path, certs):
    result = start(tmp_path, tls_settings(certs, free_ports(1), **{"ssl.key.password": "no"}))
    assert result.returncode == 1
    assert f"cannot load {certs.server_keystore}" in result.stderr
    assert "ssl.key.password is wrong" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_keystore_that_is_not_pem(tmp_path, certs):
    bogus = tmp_path / "keystore.p12"
    bogus.write_bytes(b"\x30\x82\x05\x00 not pem")
    result = start(tmp_path, tls_settings(certs, free_ports(1), keystore=bogus))
    assert result.returncode == 1
    assert f"{bogus}: not a PEM file" in result.stderr
    assert "Traceback" not in result.stderr
