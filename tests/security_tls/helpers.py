"""An appliance on an SSL listener (or SASL_SSL), and a raw TLS protocol client, for the TLS
tests."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
from pathlib import Path

from klog.protocol.client import ClientConnection
from tests.conftest import FAST_GROUPS, REPO, Appliance, free_ports
from tests.security.helpers import MECHANISMS, PLAIN_USERS, SCRAM_PASSWORD, SCRAM_USER, plain_jaas
from tests.security_tls.certs import KEY_PASSWORD, Certs
from tests.worker.raw import RawClient


def tls_settings(certs: Certs, port: int, keystore: Path | None = None, **extra) -> dict:
    return {"listeners": f"SSL://127.0.0.1:{port}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore or certs.server_keystore),
            "ssl.key.password": KEY_PASSWORD,
            "group.initial.rebalance.delay.ms": "0",
            **extra}


def tls_appliance(workdir: Path, certs: Certs, *, log_dirs: int = 1,
                  keystore: Path | None = None, **extra) -> Appliance:
    """Not started; the listener is SSL on 127.0.0.1 (worker i on port + i)."""
    port = free_ports(log_dirs)
    return Appliance(workdir, log_dirs=log_dirs, port=port,
                     settings=tls_settings(certs, port, keystore, **extra))


def sasl_ssl_appliance(workdir: Path, certs: Certs, **extra) -> Appliance:
    """Not started: alone on a SASL_SSL listener (the SSL keystore of `tls_settings`), PLAIN
    users from its JAAS key and the SCRAM-SHA-512 user added by `klog users add` before it
    first starts (tests/security/helpers.py's users)."""
    port = free_ports(1)
    appliance = Appliance(workdir, port=port, settings={
        **tls_settings(certs, port), "listeners": f"SASL_SSL://127.0.0.1:{port}",
        "sasl.enabled.mechanisms": MECHANISMS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas(PLAIN_USERS),
        **FAST_GROUPS, **extra})
    secret = workdir / "scram-password"
    secret.write_text(SCRAM_PASSWORD + "\n")
    subprocess.run([sys.executable, "-m", "klog_cli.main", "users", "add", SCRAM_USER,
                    "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret),
                    "--config", str(appliance.config)],
                   cwd=REPO, check=True, capture_output=True, timeout=60)
    return appliance


def client_context(certs: Certs, *, with_cert: bool = False) -> ssl.SSLContext:
    """A verifying client context: the test CA, hostname checked."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    if with_cert:
        context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    return context


class TlsRawClient(RawClient):
    """klog's sans-IO client codec over a socket, verifying TLS when given a context; frames
    up to 256 MiB (large fetches)."""

    def __init__(self, port: int, context: ssl.SSLContext | None, timeout_s: float = 20.0,
                 server_hostname: str = "127.0.0.1"):
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.sock = (sock if context is None
                     else context.wrap_socket(sock, server_hostname=server_hostname))
        self.codec = ClientConnection(client_id="raw-tls-test", max_frame_bytes=256 << 20)

    def peer_serial(self) -> int:
        return int(self.sock.getpeercert()["serialNumber"], 16)
