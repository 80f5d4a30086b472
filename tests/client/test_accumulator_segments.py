"""The compiled encoding of send_batch's segments (klog/protocol/_recordsc_segments.c, used by
ProducerBatch.encode) against the reference: the record tuples of ``_all_records()`` through
``build_batch``. The two must give the same bytes for every shape the compiled path takes, and
the compiled path must decline (None) every shape it leaves to the reference. No appliance:
the batches are built by hand, as the accumulator builds them; well under a second.
"""

from __future__ import annotations

import pytest

from klog.producer import batch as batch_module
from klog.producer.batch import ProducerBatch
from klog.protocol import records_codec
from klog.protocol.records import build_batch, decode_batch

compiled = pytest.mark.skipif(batch_module._encode_segments is None,
                              reason=f"the compiled codec is off: {records_codec.FALLBACK_REASON}")


def reference(batch: ProducerBatch, codec: int = 0) -> bytes:
    return build_batch(batch._all_records(), codec=codec, producer_id=batch.producer_id,
                       producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                       is_transactional=batch.transactional)


def joined(data) -> bytes:
    """encode()'s answer as one bytes: it may be the header and the body apart."""
    return data if isinstance(data, bytes) else b"".join(data)


def made(records=(), segments=(), *, transactional=False) -> ProducerBatch:
    batch = ProducerBatch("t", 0, 1_000, 2_000, None)
    batch.records.extend(records)
    for timestamp_ms, key, values, headers in segments:
        batch.add_segment(timestamp_ms, key, list(values), headers)
    batch.stamp(7, 3, 1_000, transactional)
    return batch


SHAPES = {
    "segments alone": made(segments=[(1_700_000_000_000, None, [b"v%d" % i for i in range(50)],
                                      None)]),
    "records then segments": made(
        records=[(1_700_000_000_000 + i, None, b"r%d" % i, None) for i in range(5)],
        segments=[(1_700_000_000_003, b"key", [b"a", b"", None, b"x" * 300], None),
                  (1_700_000_000_010, None, [b"y" * 200] * 400, [])]),
    "timestamps going back": made(
        records=[(1_700_000_000_500, None, b"late", None)],
        segments=[(1_700_000_000_000, None, [b"early"], ())]),
    "a large batch": made(
        segments=[(1_700_000_000_000, None, [b"z" * 200] * 5_000, None)]),
    "transactional": made(segments=[(1_700_000_000_000, b"k", [b"1", b"2"], None)],
                          transactional=True),
}


@compiled
@pytest.mark.parametrize("name", SHAPES)
@pytest.mark.parametrize("codec", [0, 1])
def test_compiled_segments_encode_as_the_record_tuples_do(name: str, codec: int) -> None:
    batch = SHAPES[name]
    pieces = batch._encode_segments(codec)
    assert pieces is not None
    ours = joined(pieces)
    assert ours == reference(batch, codec)
    header, records = decode_batch(ours)
    assert header.records_count == len(records) == batch.count


@compiled
@pytest.mark.parametrize("records, segments", [
    ([(1_000, None, b"r", [("h", b"v")])], [(1_000, None, [b"a"], None)]),
    ([], [(1_000, None, [b"a"], [("h", None)])]),
    ([], [(1_000, None, [bytearray(b"a")], None)]),
    ([], [(1_000, bytearray(b"k"), [b"a"], None)]),
    ([(1_000, None, memoryview(b"r"), None)], [(1_000, None, [b"a"], None)]),
])
def test_other_shapes_are_left_to_the_reference(records, segments) -> None:
    batch = made(records, segments)
    assert batch._encode_segments(0) is None
    assert joined(batch.encode(0)) == reference(batch)  # encode() falls back to the tuples


def test_encode_gives_the_reference_bytes_on_either_path() -> None:
    for batch in SHAPES.values():
        batch.data = None
        assert joined(batch.encode(0)) == reference(batch)


@compiled
def test_the_copy_without_the_gil_writes_the_same_bytes() -> None:
    batch = SHAPES["records then segments"]
    records, segments = batch.records, batch.segments
    base_ts = records[0][0]
    held = batch_module._encode_segments(records, segments, base_ts)
    assert batch_module._encode_segments(records, segments, base_ts, 0) == held


@compiled
@pytest.mark.parametrize("version", [3, 8, 9, 10])
def test_a_produce_request_carries_the_pieces_as_the_joined_batch_and_the_body_uncopied(
        version: int) -> None:
    """encode() gives the compiled path's header and body apart; the Produce request must
    be the very bytes it would be with the batch joined, and the body must reach the
    socket's chunks as the object itself (joining it cost a megabyte copy per batch)."""
    from klog.protocol.apis import produce
    from klog.protocol.chunks import join_chunks
    from klog.protocol.client import ClientConnection

    batch = SHAPES["a large batch"]
    batch.data = None
    pieces = batch.encode(0)
    assert isinstance(pieces, tuple) and len(pieces) == 2
    frames = []
    for records in (pieces, joined(pieces)):
        request = produce.Request(transactional_id=None, acks=-1, timeout_ms=30_000,
                                  topic_data=[produce.TopicProduceData(name="t", partition_data=[
                                      produce.PartitionProduceData(index=0, records=records)])])
        _, chunks = ClientConnection(client_id="c").send_request_chunks(
            produce.SPEC.key, version, request)
        frames.append((chunks, join_chunks(chunks)))
    assert frames[0][1] == frames[1][1]
    assert any(chunk is pieces[1] for chunk in frames[0][0])
