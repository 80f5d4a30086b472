"""An appliance on an SSL listener, and a raw TLS protocol client, for the TLS tests."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

from klog.protocol.client import ClientConnection
from tests.conftest import Appliance, free_ports
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
