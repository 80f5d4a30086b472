"""The broker's receive-into framing: frames arrive whole and in order however the bytes are
cut, a frame handed out never changes afterwards, and a large frame is received into a
buffer of its own (the kernel's copy the only one)."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klog.protocol.arena_frames import (
    ARENA_BYTES,
    FIRST_ARENA_BYTES,
    OWN_BUFFER_BYTES,
    ArenaFrameBuffer,
    BufferPool,
)
from klog.protocol.exceptions import FramingError


def framed(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def receive_in_reads(frames: ArenaFrameBuffer, data: bytes, cuts: list[int]) -> list:
    """Feed ``data`` as a socket would: each read fills at most the buffer given and at most
    the next cut's length; frames are taken after every read, as the connection does."""
    out, pos, cut = [], 0, 0
    while pos < len(data):
        into = frames.get_buffer()
        assert len(into) > 0
        n = min(len(into), len(data) - pos, cuts[cut % len(cuts)])
        cut += 1
        into[:n] = data[pos:pos + n]
        frames.buffer_updated(n)
        pos += n
        while (frame := frames.next_frame()) is not None:
            out.append(frame)
    return out


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 7, 300, 5_000, OWN_BUFFER_BYTES - 1,
                                       OWN_BUFFER_BYTES, 300_000, 1_100_000]),
                      min_size=1, max_size=8),
       cuts=st.lists(st.integers(1, 400_000), min_size=1, max_size=6).map(
           lambda cuts: [max(cut, 1000) for cut in cuts[1:]] + cuts[:1]))
def test_frames_arrive_whole_in_order_however_the_reads_cut(sizes, cuts):
    payloads = [payload(size, i) for i, size in enumerate(sizes)]
    frames = ArenaFrameBuffer()
    got = receive_in_reads(frames, framed(*payloads), cuts)
    assert [bytes(f) for f in got] == payloads
    assert frames.buffered_bytes == 0


def test_a_frame_handed_out_never_changes_while_later_bytes_arrive():
    small = [payload(1_000, i) for i in range(600)]  # several arenas' worth
    frames = ArenaFrameBuffer()
    got = receive_in_reads(frames, framed(*small), [3_333, 70_000, 11])
    assert len(got) == 600
    assert [bytes(f) for f in got] == small  # checked after everything was received
    assert len({id(f.obj) for f in got}) > 1  # more than one arena was used


def test_a_large_frame_gets_a_buffer_of_its_own_filled_by_the_reads():
    big = payload(1_000_000, 1)
    frames = ArenaFrameBuffer()
    frames.receive_data(framed(b"a" * 10) + struct.pack(">i", len(big)) + big[:200_000])
    assert bytes(frames.next_frame()) == b"a" * 10
    assert frames.next_frame() is None  # an eighth is here: the rest goes to its own buffer
    into = frames.get_buffer()
    assert len(into) == len(big) - 200_000  # exactly the rest of the frame, nothing beyond
    into[:] = big[200_000:]
    frames.buffer_updated(len(into))
    frame = frames.next_frame()
    assert bytes(frame) == big
    assert frame.obj is into.obj and len(frame) == len(big)


def test_a_pooled_buffer_is_reused_only_once_no_frame_refers_to_it():
    pool = BufferPool()
    frames = ArenaFrameBuffer(pool=pool)
    first_payload, second_payload = payload(300_000, 6), payload(299_000, 7)
    frames.receive_data(framed(first_payload))
    first = frames.next_frame()
    records = first[100:200]  # what a decoded request keeps: a slice of the frame
    pooled = {id(first.obj)}  # the pool keeps them alive, so an id stays a buffer's own
    del first
    frames.receive_data(framed(second_payload))
    second = frames.next_frame()
    assert second.obj is not records.obj  # still read through the slice: not reused
    assert bytes(records) == first_payload[100:200]
    pooled.add(id(second.obj))
    del records, second
    frames.receive_data(framed(payload(280_000, 8)))  # more than an arena holds
    assert id(frames.next_frame().obj) in pooled  # nothing refers to them now: reused
    assert len(pool._buffers) == 2


def test_the_pool_keeps_at_most_its_limit():
    pool = BufferPool(max_bytes=1 << 20, max_buffer_bytes=512 << 10)
    held = [pool.take(300_000) for _ in range(4)]  # 512 KiB each, all in use
    assert len({id(v.obj) for v in held}) == 4
    assert sum(len(b) for b in pool._buffers) <= 1 << 20
    assert len(pool.take(600_000).obj) == 600_000  # above the buffer limit: its own


def test_a_large_frame_and_the_next_in_one_receive_data():
    big, after = payload(200_000, 2), payload(50, 3)
    frames = ArenaFrameBuffer()
    head = framed(big)[:100]
    frames.receive_data(head)
    assert frames.next_frame() is None
    frames.receive_data(framed(big)[100:] + framed(after))  # crosses the big frame's end
    assert bytes(frames.next_frame()) == big
    assert bytes(frames.next_frame()) == after
    assert frames.next_frame() is None and frames.buffered_bytes == 0


def test_a_small_frame_that_outgrows_the_arena_moves_to_a_new_one():
    frames = ArenaFrameBuffer()
    filler = payload(ARENA_BYTES - 20_000, 4)  # leaves room for the head of the next only
    nxt = payload(OWN_BUFFER_BYTES - 1, 5)
    data = framed(filler, nxt)
    got = receive_in_reads(frames, data, [len(framed(filler)) + 100, 1_000_000])
    assert [bytes(f) for f in got] == [filler, nxt]
    assert got[0].obj is not got[1].obj


@pytest.mark.parametrize("size", [-1, -(2**31), 1025, 2**31 - 1])
def test_a_bad_size_fails_before_memory_is_reserved(size):
    frames = ArenaFrameBuffer(max_frame_bytes=1024)
    frames.receive_data(struct.pack(">i", size))
    with pytest.raises(FramingError):
        frames.next_frame()
    assert len(frames.get_buffer()) <= ARENA_BYTES


def test_a_size_prefix_then_silence_reserves_little():
    frames = ArenaFrameBuffer(max_frame_bytes=100 << 20)
    frames.receive_data(struct.pack(">i", 90 << 20) + b"x" * 100)
    assert frames.next_frame() is None
    assert len(frames.get_buffer()) <= ARENA_BYTES  # not the 90 MB the prefix names
    frames.receive_data(b"y" * 600_000)  # reserved memory grows with what arrives
    assert frames.next_frame() is None
    assert len(frames.get_buffer()) < 4 * 600_000


def test_an_idle_connection_holds_a_small_arena_and_a_busy_one_grows_to_the_largest():
    frames = ArenaFrameBuffer()
    frames.receive_data(b"\x00\x00")  # two bytes of a size prefix, then silence
    assert len(frames.get_buffer()) <= FIRST_ARENA_BYTES
    payloads = [payload(1_000, i) for i in range(2_000)]
    got = receive_in_reads(frames, framed(*payloads)[2:], [70_000])
    assert [bytes(f) for f in got] == payloads
    assert len(got) == 2_000
    assert len(got[-1].obj) == ARENA_BYTES


def whole_frames_in_reads(frames: ArenaFrameBuffer, data: bytes, frame_bytes: int,
                          on_frame) -> int:
    """Feed ``data`` in reads that end on frame boundaries (as requests that arrive one at a
    time do), calling ``on_frame(index, frame)`` for each; the number of arenas made."""
    made = 0
    new_arena = frames._new_arena

    def counted(size):
        nonlocal made
        made += 1
        new_arena(size)

    frames._new_arena = counted
    pos, seen = 0, 0
    while pos < len(data):
        into = frames.get_buffer()
        n = min(len(into), len(data) - pos, 60 * frame_bytes)
        n -= n % frame_bytes or 0
        n = n or min(len(into), len(data) - pos)
        into[:n] = data[pos:pos + n]
        frames.buffer_updated(n)
        pos += n
        del into
        while (frame := frames.next_frame()) is not None:
            on_frame(seen, frame)
            seen += 1
            del frame
    return made


def test_an_arena_whose_frames_are_all_let_go_is_filled_again_from_its_front():
    """A busy connection whose requests finish before the next read reuses its largest arena
    instead of allocating (and zeroing) a new one each time it fills."""
    frames = ArenaFrameBuffer()
    payloads = [payload(1_000, i) for i in range(3_000)]  # a dozen largest arenas' worth
    seen = []

    def check(index, frame):  # read, then let go, as a request is
        assert bytes(frame) == payloads[index]
        seen.append(index)

    made = whole_frames_in_reads(frames, framed(*payloads), 1_004, check)
    assert seen == list(range(3_000))
    # 4, 8, ... 256 KiB while growing, then the largest one over and over
    assert made <= 8, made


def test_an_arena_with_a_frame_still_held_is_never_written_over():
    frames = ArenaFrameBuffer()
    payloads = [payload(1_000, i) for i in range(3_000)]
    held = []

    def keep_some(index, frame):  # one request in 300 outlives the reads (waits on replicas)
        if index % 300 == 0:
            held.append((index, frame))

    made = whole_frames_in_reads(frames, framed(*payloads), 1_004, keep_some)
    assert [bytes(frame) for _, frame in held] == [payloads[i] for i, _ in held]
    assert made >= 10  # each arena with a held frame was left alone for a new one
