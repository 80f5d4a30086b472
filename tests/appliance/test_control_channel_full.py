"""The control channel when both sides send more than the socket holds (issue 26).

With 10,000 partitions a worker asked for hundreds of ISR changes at once while the
supervisor sent it whole-topic broadcasts: both blocked in a full send, neither reading,
until the heartbeat watchdog killed the worker 30 s later. `tell` now reads and keeps what
arrives while its own send waits. A socketpair and a thread stand for the supervisor; about
1 s."""

from __future__ import annotations

import socket
import threading

from appliance.control.channel import AlterPartition, MessageReader, Reply, encode
from appliance.control.client import ControlPlaneClient
from appliance.segments.config import LogConfig

REPLIES = 3000  # ~100 bytes each: far beyond a 4 KiB socket buffer
REQUESTS = 3000


def test_a_worker_and_a_supervisor_both_sending_a_full_buffer_both_finish():
    supervisor, worker = socket.socketpair()
    for sock in (supervisor, worker):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client = ControlPlaneClient(worker, defaults=LogConfig(), default_partitions=1)
    worker.setblocking(False)  # as the worker's loop has it
    pumps = []
    client.on_kept = lambda: pumps.append(1)
    received: list = []

    def supervisor_side():
        # send everything first (blocking, as WorkerChannel.send does), then read
        supervisor.sendall(b"".join(encode(Reply(i + 1, message="x" * 50))
                                    for i in range(REPLIES)))
        reader = MessageReader()
        while len(received) < REQUESTS:
            reader.feed(supervisor.recv(1 << 16))
            received.extend(reader.messages())

    thread = threading.Thread(target=supervisor_side, daemon=True)
    thread.start()
    for i in range(REQUESTS):
        client.tell(AlterPartition("topic", i, 0, (1, 2, 3), id=i + 1))
    thread.join(60)  # a guard against a hang only: before the fix this never returned
    assert not thread.is_alive(), "the supervisor side is still blocked"
    assert [m.partition for m in received] == list(range(REQUESTS))
    assert pumps, "the kept replies were not announced to the loop"
    client.pump()  # the loop's pump handles what tell kept, in order
    assert [r.id for r in client._replies] == list(range(1, REPLIES + 1))
