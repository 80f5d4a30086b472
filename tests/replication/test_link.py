"""The follower's link to its leader (appliance/workers/replication/link.py): responses read
straight into a buffer of their own size, records decoded as views of it. Against a real
worker's Fetch (sendfile), a scripted peer for what a worker never sends, and the framing
alone with reads cut anywhere."""

from __future__ import annotations

import asyncio
import os

import pytest

from appliance.workers.replication.link import HEAD_BYTES, ReplicaLink, _Frames
from klog.protocol.apis import fetch, metadata, produce
from klog.protocol.arena_frames import BufferPool
from klog.protocol.chunks import join_chunks
from klog.protocol.exceptions import FramingError
from klog.protocol.frames import NEED_DATA
from klog.protocol.record_batch import scan_batches
from klog.protocol.records import build_batch
from klog.protocol.server import ServerConnection
from tests.interop.helpers import create_topic
from tests.worker.raw import RawClient
from tests.worker.test_produce_fetch_raw import fetch_request, produce_request


def test_a_fetch_answer_arrives_whole_with_records_as_views_of_it(appliance):
    create_topic(appliance.bootstrap, "linked", 1)
    producer = RawClient(appliance.port)
    values = [bytes([i]) * 40_000 for i in range(20)]  # 0.8 MB over 20 batches
    for value in values:
        batch = build_batch([(1000, None, value, [])])
        producer.call(produce, 8, **produce_request("linked", batch))
    producer.close()

    async def read_all():
        link = await ReplicaLink.open("127.0.0.1", appliance.port, node_id=999)
        try:
            answer = await link.ask(fetch.SPEC.key, 11, fetch.Request(
                **fetch_request("linked", 0, 0) | {"max_bytes": 4 << 20}))
            return answer.responses[0].partitions[0].records
        finally:
            await link.close()
    records = asyncio.run(read_all())
    assert isinstance(records, memoryview) and isinstance(records.obj, bytearray)
    batches = list(scan_batches(records))  # CRCs checked
    assert [h.base_offset for _, h in batches] == list(range(len(values)))
    assert sum(h.size for _, h in batches) == len(records)


METADATA = metadata.Response(throttle_time_ms=0, brokers=[], cluster_id="c",
                             controller_id=-1, topics=[], cluster_authorized_operations=0)


async def _scripted(answer, *, piece: int | None = None):
    """A peer that reads one request and writes `answer(request)`, `piece` bytes per write."""
    async def serve(reader, writer):
        server = ServerConnection()
        while (request := server.next_request()) is NEED_DATA:
            server.receive_data(await reader.read(4096))
        data = answer(server, request)
        step = piece or len(data)
        for start in range(0, len(data), step):
            writer.write(data[start:start + step])
            await writer.drain()
        writer.close()
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _whole(server, request) -> bytes:
    return join_chunks(server.encode_response(request, METADATA))


def _ask_scripted(answer, **kwargs):
    async def run():
        server, port = await _scripted(answer, **kwargs)
        link = await ReplicaLink.open("127.0.0.1", port, node_id=1, max_frame_bytes=1 << 16)
        try:
            return await link.ask(metadata.SPEC.key, 8, metadata.Request(
                topics=[], allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False), timeout_s=10)
        finally:
            await link.close()
            server.close()
    return asyncio.run(run())


def test_a_response_written_a_byte_at_a_time_arrives_whole():
    assert _ask_scripted(_whole, piece=1).cluster_id == "c"


def test_a_size_above_the_limit_is_refused_before_anything_is_allocated():
    with pytest.raises(FramingError, match="outside"):
        _ask_scripted(lambda server, request: (1 << 30).to_bytes(4, "big"))


def test_a_connection_closed_mid_response_is_an_error():
    with pytest.raises(ConnectionError):
        _ask_scripted(lambda server, request: _whole(server, request)[:20])


# the framing alone: reads as the transport makes them, cut anywhere -----------------------

class _Transport:
    closed = False

    def close(self):
        self.closed = True


def _frames():
    frames = _Frames(max_frame_bytes=8 << 20)
    frames.connection_made(_Transport())
    return frames


def _feed(frames, data: bytes, pieces: list[int]) -> None:
    """Deliver `data` the way a transport does, one read per size in `pieces` (the rest in
    reads as large as each buffer offered)."""
    view, sizes = memoryview(data), list(pieces)
    while view:
        into = frames.get_buffer(-1)
        n = min(len(into), len(view), sizes.pop(0) if sizes else len(view))
        into[:n] = view[:n]
        frames.buffer_updated(n)
        view = view[n:]


def _framed(*payloads: bytes) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


@pytest.mark.parametrize("pieces", [[], [1, 2, 3], [5, 70_000], [100_003], [3] * 50])
def test_small_and_large_frames_arriving_together_or_cut_anywhere_come_whole_in_order(pieces):
    payloads = [b"idle answer", os.urandom(HEAD_BYTES * 3 + 17), b"", os.urandom(300),
                os.urandom(HEAD_BYTES - 4), os.urandom(HEAD_BYTES - 3), b"last"]
    frames = _frames()
    _feed(frames, _framed(*payloads), pieces)
    got = []
    while frames._done:
        got.append(bytes(frames._done.popleft()))
    assert got == payloads
    assert frames._frame is None and frames._head_used == 0


def test_a_large_frame_lands_in_a_pooled_buffer_of_its_size_with_its_first_bytes_copied_over():
    big = os.urandom(1 << 20)
    frames = _frames()
    _feed(frames, _framed(b"small", big), [1000])  # the prefix and 991 bytes of it in one read
    assert frames._done.popleft() == b"small"
    frame = frames._done.popleft()
    assert isinstance(frame, memoryview) and len(frame) == len(big) and bytes(frame) == big


def test_a_hostile_size_in_the_head_closes_the_link_before_anything_is_allocated():
    frames = _frames()
    _feed(frames, _framed(b"ok") + (1 << 30).to_bytes(4, "big"), [])
    assert frames._done.popleft() == b"ok"
    assert frames.transport.closed and isinstance(frames._error, FramingError)


def test_no_response_within_the_timeout_is_a_timeout_error():
    async def run():
        frames = _frames()
        with pytest.raises(TimeoutError):
            await frames.next_frame(0.05)
        _feed(frames, _framed(b"late"), [])
        assert await frames.next_frame(0.05) == b"late"
    asyncio.run(run())


def test_large_frames_reuse_a_pooled_buffer_once_no_view_of_the_last_is_left():
    pool = BufferPool()
    frames = _Frames(max_frame_bytes=8 << 20, pool=pool)
    frames.connection_made(_Transport())
    first, second, third = (os.urandom(300_000) for _ in range(3))
    _feed(frames, _framed(first), [])
    kept = frames._done.popleft()
    assert bytes(kept) == first
    _feed(frames, _framed(second), [])
    held = frames._done.popleft()
    assert held.obj is not kept.obj  # a view of the first is alive: not written over
    assert bytes(kept) == first and bytes(held) == second
    owner = id(kept.obj)  # its id only: a reference would keep it in use
    assert owner in {id(b) for b in pool._buffers}  # the pool holds it: the id stays its own
    del kept
    _feed(frames, _framed(third), [])
    assert id(frames._done.popleft().obj) == owner  # nothing refers to it now: reused
