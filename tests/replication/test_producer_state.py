"""Idempotent producer sequence rules (Kafka's), on batch headers alone."""

from __future__ import annotations

from appliance.workers.replication.producer_state import ProducerStates, Verdict
from klog.protocol.record_batch import BatchHeader


def header(pid=7, epoch=0, seq=0, count=10):
    return BatchHeader(0, 100, -1, 2, 0, 0, count - 1, 0, 0, pid, epoch, seq, count)


def test_in_order_batches_append_and_a_retry_is_a_duplicate():
    states = ProducerStates()
    first = header(seq=0)
    assert states.check(first)[0] is Verdict.APPEND
    states.record(first, base_offset=100)
    second = header(seq=10)
    assert states.check(second)[0] is Verdict.APPEND
    states.record(second, base_offset=110)
    verdict, cached = states.check(header(seq=0))
    assert verdict is Verdict.DUPLICATE and cached.base_offset == 100
    assert states.check(header(seq=30))[0] is Verdict.OUT_OF_ORDER
    assert states.check(header(seq=5))[0] is Verdict.OUT_OF_ORDER


def test_epochs_fence_old_producers_and_restart_sequences():
    states = ProducerStates()
    states.record(header(epoch=1, seq=0), base_offset=0)
    assert states.check(header(epoch=0, seq=10))[0] is Verdict.FENCED
    assert states.check(header(epoch=2, seq=0))[0] is Verdict.APPEND
    assert states.check(header(epoch=2, seq=3))[0] is Verdict.OUT_OF_ORDER


def test_non_idempotent_batches_are_never_checked():
    states = ProducerStates()
    plain = header(pid=-1, epoch=-1, seq=-1)
    states.record(plain, base_offset=0)
    assert states.check(plain)[0] is Verdict.APPEND
    assert len(states) == 0


def test_only_five_batches_are_remembered():
    states = ProducerStates()
    for i in range(6):
        states.record(header(seq=i * 10), base_offset=i * 10)
    assert states.check(header(seq=0))[0] is Verdict.OUT_OF_ORDER
    assert states.check(header(seq=10))[0] is Verdict.DUPLICATE
