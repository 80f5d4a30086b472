"""Large responses received straight into a buffer of their size (klog/wire.py,
`FrameBuffer.take_partial`): the framing rules, then a consumer's megabyte fetches from a
real appliance, read whole and in order, with small responses on the same connection before
and after."""

from __future__ import annotations

import struct

import pytest

import klog
from klog.protocol.exceptions import FramingError
from klog.protocol.frames import FrameBuffer
from klog.wire import LARGE_FRAME_BYTES
from tests.client.conftest import read_all


def framed(content: bytes) -> bytes:
    return struct.pack(">i", len(content)) + content


def test_take_partial_hands_over_the_start_of_a_large_frame_only():
    frames = FrameBuffer()
    small, large = b"s" * 10, bytes(range(256)) * 1024  # 256 KiB
    frames.receive_data(framed(small) + framed(large)[:1000])
    assert bytes(frames.next_frame()) == small
    assert frames.next_frame() is None
    assert frames.take_partial(10 * 1024 * 1024) is None  # smaller than asked: stays
    size, head = frames.take_partial(64 * 1024)
    assert size == len(large) and bytes(head) == large[:996]
    assert frames.buffered_bytes == 0 and frames.take_partial(1) is None
    frames.receive_data(framed(small))  # the buffer goes on after the hand-over
    assert bytes(frames.next_frame()) == small
    whole = FrameBuffer()
    whole.receive_data(framed(large))  # all here: a frame, not a partial one
    assert whole.take_partial(1) is None and bytes(whole.next_frame()) == large
    bad = FrameBuffer(max_frame_bytes=100)
    bad.receive_data(struct.pack(">i", 1000) + b"x")
    with pytest.raises(FramingError):
        bad.next_frame()  # the size is refused before any partial hand-over


def test_megabyte_fetches_arrive_whole_and_in_order(broker, topic_factory):
    topic = topic_factory(1)
    values = [b"%08d" % i + bytes(1000) for i in range(6_000)]  # ~6 MB: several 1 MB fetches
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        for value in values:
            producer.send(topic, value)
    assert LARGE_FRAME_BYTES < 1 << 20
    records = read_all(broker.bootstrap, topic, len(values))
    assert [r.value for r in records] == values
    assert [r.offset for r in records] == list(range(len(values)))
