"""The worker's end of the control channel, against a supervisor end speaking the channel's
wire format over a real socketpair.

An ISR change does not wait for its answer (a ZooKeeper write away): the leader's worker
blocked its loop for each one, so its followers' fetches went unserved, fell behind and left
the ISR in turn. After a restart of one appliance of three with 180 partitions, ISRs flapped
for 289 s (2220 shrinks of live followers, 1290 down to the leader alone); answered through
a callback, the fleet was whole again in 16.5 s without one (measured with tests/faults'
fleet, load average 10)."""

from __future__ import annotations

import socket
import threading

from appliance.control.channel import (
    AllocateProducerId,
    AlterPartition,
    Message,
    MessageReader,
    Reply,
    encode,
)
from appliance.control.client import ControlPlaneClient
from appliance.segments.config import LogConfig
from klog.protocol.error_codes import ErrorCode


class SupervisorEnd:
    """The other end: reads requests, answers when told to."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.reader = MessageReader()

    def requests(self, count: int) -> list[Message]:
        found: list[Message] = []
        while len(found) < count:
            self.reader.feed(self.sock.recv(1 << 16))
            found += list(self.reader.messages())
        return found

    def reply(self, request: Message, **fields) -> None:
        self.sock.sendall(encode(Reply(request.id, **fields)))


def pair():
    ours, theirs = socket.socketpair()
    client = ControlPlaneClient(ours, defaults=LogConfig(), default_partitions=1)
    ours.setblocking(False)  # as on the worker's loop
    return client, SupervisorEnd(theirs)


def test_an_isr_change_is_answered_through_its_callback_without_waiting():
    client, supervisor = pair()
    answers: list[ErrorCode] = []
    client.alter_partition(AlterPartition("t", 0, 3, (101, 201)), answers.append)  # at once
    (request,) = supervisor.requests(1)
    assert request == AlterPartition("t", 0, 3, (101, 201), id=request.id) and answers == []
    client.pump()  # nothing yet
    supervisor.reply(request, error=ErrorCode.FENCED_LEADER_EPOCH)
    client.pump()  # the loop's reader callback, once the answer is there
    assert answers == [ErrorCode.FENCED_LEADER_EPOCH]


def test_a_blocking_request_meanwhile_gets_its_own_answer():
    client, supervisor = pair()
    answers: list[ErrorCode] = []
    client.alter_partition(AlterPartition("t", 0, 3, (101,)), answers.append)
    got = {}
    asking = threading.Thread(target=lambda: got.update(id=client.allocate_producer_id()))
    asking.start()
    isr, producer_id = supervisor.requests(2)
    assert (type(isr), type(producer_id)) == (AlterPartition, AllocateProducerId)
    supervisor.reply(isr, error=ErrorCode.NONE)  # in order, as the supervisor answers
    supervisor.reply(producer_id, producer_id=7)
    asking.join(10)
    assert got == {"id": 7} and answers == [ErrorCode.NONE]
