"""`drop_aborted`: a read_committed fetch answer without the batches of aborted transactions,
per batch (Kafka's consumer rule), control batches left for the decoder to skip."""

from __future__ import annotations

from types import SimpleNamespace

from klog.consumer.records import CompletedFetch, decode, drop_aborted, next_fetch_offset
from klog.protocol.records import build_batch
from klog.types import TopicPartition


def _batch(offset: int, pid: int, values, *, txn=True, control=False) -> bytes:
    return build_batch([(1000, None, v, ()) for v in values], base_offset=offset,
                       producer_id=pid, producer_epoch=0, base_sequence=offset,
                       is_transactional=txn, is_control=control)


def test_aborted_batches_go_control_batches_stay_positions_move_past_both():
    data = b"".join([
        _batch(0, 5, [b"a0", b"a1"]),               # pid 5, aborted
        _batch(2, 6, [b"k2"]),                      # pid 6, committed later
        _batch(3, 5, [b"\x00\x00\x00\x00"], control=True),  # pid 5's ABORT marker
        _batch(4, 5, [b"k4"]),                      # pid 5's next transaction: kept
        _batch(5, 7, [b"k5"], txn=False),           # not transactional
        _batch(6, 8, [b"a6"]),                      # pid 8, aborted, no marker yet fetched
    ])
    aborted = [SimpleNamespace(producer_id=5, first_offset=0),
               SimpleNamespace(producer_id=8, first_offset=6)]
    kept = drop_aborted(data, aborted)
    records = decode(CompletedFetch(TopicPartition("t", 0), 0, kept, 7, 0))
    assert [(r.offset, r.value) for r in records] == [(2, b"k2"), (4, b"k4"), (5, b"k5")]
    assert next_fetch_offset(data) == 7  # the position comes from the whole answer


def test_nothing_aborted_in_range_returns_the_same_bytes():
    data = _batch(0, 5, [b"x"])
    assert drop_aborted(data, [SimpleNamespace(producer_id=5, first_offset=10)]) is data
    assert drop_aborted(data, [SimpleNamespace(producer_id=9, first_offset=0)]) is data
