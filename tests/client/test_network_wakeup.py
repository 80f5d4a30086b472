"""The blocking client's `Network.wakeup`, which other threads call to end the sender's
select when they queued work: a wakeup that lands while the sender drains the pipe must not
leave the next one skipped. It did (the flag was cleared before the drain swallowed the new
byte), and a producer sending from several threads then slept out its whole poll timeout with
a batch queued: 75-105 s in half the runs of test_fast_send's four-thread test."""

from __future__ import annotations

import select

from klog.wire import Network


class _WakeupDuringDrain:
    """The sender's end of the pipe, where another thread's wakeup lands during the first
    read of a drain."""

    def __init__(self, network: Network, real):
        self.network, self.real, self.fired = network, real, False

    def recv(self, size: int) -> bytes:
        data = self.real.recv(size)
        if not self.fired:
            self.fired = True
            self.network.wakeup()  # the other thread, between the sender's reads
        return data

    def __getattr__(self, name):
        return getattr(self.real, name)


def pipe_has_a_byte(network: Network) -> bool:
    readable, _, _ = select.select([network._wake_r.real], [], [], 0)
    return bool(readable)


def test_a_wakeup_during_the_drain_does_not_swallow_the_next_one():
    network = Network("127.0.0.1:9", client_id="t", request_timeout_ms=1000,
                      address_of=lambda node: None)
    try:
        network._wake_r = _WakeupDuringDrain(network, network._wake_r)
        network.wakeup()
        assert network.poll(0) == []  # the sender wakes and drains, meeting the other wakeup
        assert network._wake_r.fired
        network.wakeup()  # new work after the sender read its state: must wake it
        assert pipe_has_a_byte(network)
        assert network.poll(0) == []
        assert not pipe_has_a_byte(network)  # drained, and ready for the next wakeup
        network.wakeup()
        assert pipe_has_a_byte(network)
    finally:
        network._wake_r = network._wake_r.real
        network.close()
