"""A request's chunks leave with sendmsg (klog.wire.BrokerConnection._write_gathered): over
a real socket whose send buffer is far smaller than the request, every partial send is
resumed at the right byte, so the peer reads exactly the joined bytes."""

from __future__ import annotations

import os
import socket
import threading
from types import SimpleNamespace

from klog.wire import BrokerConnection


def test_partial_sends_resume_at_the_right_byte():
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ours.settimeout(10)  # as a BrokerConnection's socket: sendmsg may send part of the iov
    chunks = [os.urandom(37), bytearray(os.urandom(3_000_000)), memoryview(os.urandom(5)),
              os.urandom(700_001)]
    expected = b"".join(bytes(c) for c in chunks)
    received = bytearray()

    def read() -> None:
        while len(received) < len(expected):
            piece = theirs.recv(65536)
            if not piece:
                return
            received.extend(piece)

    reader = threading.Thread(target=read)
    reader.start()
    conn = SimpleNamespace(sock=ours, close=ours.close)
    BrokerConnection._write_gathered(conn, chunks)
    reader.join(30)
    ours.close()
    theirs.close()
    assert bytes(received) == expected
