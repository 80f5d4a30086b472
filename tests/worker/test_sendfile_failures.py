"""A Fetch answer's record bytes go out with sendfile; a client that resets its connection
just then must end that connection cleanly. asyncio reports a first sendfile call that fails
as "sendfile not available" and would fall back to reading the file through a seek() the
worker's descriptor does not have: the write task died with AttributeError, the connection
left open with half an answer written (seen in the fault tests' logs)."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from types import SimpleNamespace

import pytest

from appliance.workers.connection import KafkaConnection
from klog.protocol.chunks import FileRegion


@pytest.mark.parametrize("reading", [True, False], ids=["reset-seen", "reset-unseen"])
def test_a_reset_during_sendfile_closes_the_connection(tmp_path, reading):
    """Whether the loop has seen the reset (the transport is closing) or not (the first
    sendfile call meets it)."""
    path = tmp_path / "segment"
    path.write_bytes(b"x" * 65536)

    async def scenario():
        server = socket.create_server(("127.0.0.1", 0))
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(
            asyncio.Protocol, *server.getsockname())
        if not reading:
            transport.pause_reading()
        peer, _ = await loop.sock_accept(server)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()  # a reset, not a FIN
        server.close()
        await asyncio.sleep(0.1)
        worker = SimpleNamespace(config=SimpleNamespace(socket_request_max_bytes=1 << 20),
                                 new_authenticator=lambda *_: None)
        connection = KafkaConnection(worker)
        connection.transport = transport
        fd = os.open(path, os.O_RDONLY)
        try:
            head = [b"header"] if reading else []  # a write would notice the reset first
            await connection._write_with_sendfile([*head, FileRegion(fd, 0, 65536)])
        finally:
            os.close(fd)
        return connection, transport

    connection, transport = asyncio.run(scenario())
    assert connection._closed and transport.is_closing()
    assert connection._writer is None
