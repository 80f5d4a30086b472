"""direct_send.send_now over a real socket pair and real files: a response that fits leaves
whole and in order; one that does not returns exactly what is left, cut where the socket
stopped (inside a byte chunk, inside a file region), and writing the rest later yields the
same bytes; a file shorter than its region and a closed peer are errors for the caller."""

from __future__ import annotations

import os
import socket

import pytest

from appliance.workers.direct_send import ShortFile, send_now
from klog.protocol.apis import fetch, produce
from klog.protocol.chunks import FileRegion
from klog.protocol.client import NEED_DATA, ClientConnection
from klog.protocol.record_batch import scan_batches
from klog.protocol.records import build_batch, decode_batches
from tests.interop.helpers import create_topic
from tests.worker.raw import RawClient
from tests.worker.test_produce_fetch_raw import fetch_request, produce_request


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def segment(tmp_path):
    data = os.urandom(3 << 20)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd, data
    os.close(fd)


def _drain(sock: socket.socket, into: bytearray) -> None:
    sock.setblocking(False)
    try:
        while chunk := sock.recv(1 << 20):
            into += chunk
    except BlockingIOError:
        pass


def test_a_response_that_fits_leaves_whole_and_in_order(pair, segment):
    a, b = pair
    fd, data = segment
    chunks = [b"head", bytearray(b"-size-"), FileRegion(fd, 100, 5000), memoryview(b"tail"),
              FileRegion(fd, 0, 0), b"end"]
    assert send_now(a.fileno(), chunks) == []
    got = bytearray()
    _drain(b, got)
    assert bytes(got) == b"head-size-" + data[100:5100] + b"tail" + b"end"


def test_what_the_socket_does_not_take_is_returned_cut_where_it_stopped(pair, segment):
    a, b = pair
    fd, data = segment
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    head = os.urandom(300_000)  # larger than both buffers: cut inside this byte chunk
    chunks = [head, FileRegion(fd, 7, len(data) - 7), b"trailer"]
    expected = head + data[7:] + b"trailer"
    got = bytearray()
    rest = send_now(a.fileno(), chunks)
    assert rest and isinstance(rest[0], memoryview)  # cut inside the first chunk
    assert len(rest) == 3 and rest[1:] == chunks[1:]
    cut_in_region = False
    while rest:
        _drain(b, got)
        rest = send_now(a.fileno(), rest)
        if rest and isinstance(rest[0], FileRegion) and rest[0].offset > 7:
            cut_in_region = True
            region = rest[0]
            assert region.fd == fd and region.offset + region.length == len(data)
    _drain(b, got)
    assert cut_in_region
    assert bytes(got) == expected


def test_a_file_shorter_than_its_region_is_a_short_file(pair, segment):
    a, _ = pair
    fd, data = segment
    with pytest.raises(ShortFile):
        send_now(a.fileno(), [b"x", FileRegion(fd, len(data), 10)])


def test_a_closed_peer_is_an_os_error(pair, segment):
    a, b = pair
    fd, _ = segment
    b.close()
    with pytest.raises(OSError):
        send_now(a.fileno(), [b"x" * 10, FileRegion(fd, 0, 1000)])


def test_answers_larger_than_the_socket_takes_leave_whole_and_in_order(appliance):
    """A real worker, and a client that asks for 6 MB of answers before reading any of them
    through a 4 KiB receive buffer: the socket (at most 4 MB of send buffer here) cannot take
    them all, so answers leave partly at once and partly through asyncio's sendfile, and
    later answers queue behind them. Each arrives whole, in order, its batches intact."""
    create_topic(appliance.bootstrap, "wide", 1)
    producer = RawClient(appliance.port)
    values = [os.urandom(100_000) for _ in range(9)]
    for _ in range(6):  # six batches of 900 kB, one per fetch answer
        batch = build_batch([(1000, None, value, []) for value in values])
        answer = producer.call(produce, 8, **produce_request("wide", batch))
        assert answer.responses[0].partition_responses[0].error_code == 0
    producer.close()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", appliance.port))
    client = ClientConnection(client_id="slow-reader")
    for batch_index in range(6):
        _, data = client.send_request(fetch.SPEC.key, 11, fetch.Request(
            **fetch_request("wide", batch_index * 9, 0)))
        sock.sendall(data)
    answers = []
    with sock:
        while len(answers) < 6:
            event = client.next_response()
            if event is NEED_DATA:
                chunk = sock.recv(65536)
                assert chunk, "the worker closed the connection"
                client.receive_data(chunk)
                continue
            answers.append(event[1].responses[0].partitions[0])
    for batch_index, answer in enumerate(answers):
        assert answer.error_code == 0
        batches = list(scan_batches(answer.records))  # CRCs checked
        assert [h.base_offset for _, h in batches][:1] == [batch_index * 9]
        _, records = next(decode_batches(answer.records))
        assert [bytes(r.value) for r in records] == values
