"""The worker's connection on a TLS transport, in this process: it knows it is TLS and whose
certificate it holds, writes a Fetch's file regions through TLS, and a client that resets
mid-fetch ends that connection cleanly (as tests/worker/test_sendfile_failures.py for
sendfile)."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from types import SimpleNamespace

import pytest

from appliance.config import build_config
from appliance.tls.context import ServerTls
from appliance.workers.connection import KafkaConnection
from appliance.workers.connection_limits import ConnectionGuard
from klog.protocol.chunks import FileRegion
from tests.security_tls.certs import KEY_PASSWORD, make_certs
from tests.security_tls.helpers import client_context


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def fake_worker():
    return SimpleNamespace(config=SimpleNamespace(socket_request_max_bytes=1 << 20),
                           guard=ConnectionGuard(max_connections=10,
                                                 max_connections_per_ip=10),
                           connections=set(), new_authenticator=lambda *_: None)


@pytest.mark.parametrize("with_cert", [True, False], ids=["client-cert", "no-cert"])
def test_a_reset_during_a_tls_fetch_closes_the_connection(tmp_path, certs, with_cert):
    tls = ServerTls(build_config({
        "listeners": "SSL://127.0.0.1:9093", "ssl.keystore.location": str(certs.server_keystore),
        "ssl.key.password": KEY_PASSWORD, "ssl.client.auth": "requested",
        "ssl.truststore.location": str(certs.ca)}))
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(8 << 20))
    worker = fake_worker()

    async def scenario():
        loop = asyncio.get_running_loop()
        made = loop.create_future()

        def factory():
            connection = KafkaConnection(worker)
            loop.call_soon(lambda: made.done() or made.set_result(connection))
            return connection

        server = await loop.create_server(factory, "127.0.0.1", 0, ssl=tls.context)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context(certs, with_cert=with_cert),
            server_hostname="localhost")
        while not worker.connections:
            await asyncio.sleep(0.01)
        (connection,) = worker.connections
        fd = os.open(path, os.O_RDONLY)
        try:
            task = connection._writer = asyncio.ensure_future(  # as _flush does
                connection._write_through_tls([b"head", FileRegion(fd, 0, 8 << 20)]))
            await reader.readexactly(1 << 20)  # a part arrives, then the client resets
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            await asyncio.wait([task], timeout=10)
            assert task.done()
        finally:
            os.close(fd)
            server.close()
        return connection

    connection = asyncio.run(scenario())
    assert connection.tls
    assert connection.principal == ("User:CN=alice,OU=eng,O=Example\\, Inc.,C=US"
                                    if with_cert else "User:ANONYMOUS")
    assert connection._closed and connection._writer is None
