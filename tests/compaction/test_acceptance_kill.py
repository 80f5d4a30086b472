"""Acceptance: kill -9 of the worker at seeded moments while its cleaner works (throttled by
log.cleaner.io.max.bytes.per.second so that a run lasts seconds), many times. After each
restart the log has recovered: every record read is one written, at its own offset, and each
key's last value is there; a producer writing throughout (idempotent, retrying) loses
nothing; the cleaner carries on afterwards."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.segments import cleaner_checkpoint
from tests.conftest import running_appliance

from .clients import assert_compacted_view, latest_by_key, read_confluent, write_updates

pytestmark = pytest.mark.interop

TOPIC = "killed"
ROUNDS = 8


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("compaction-kill"), settings={
            "log.cleaner.backoff.ms": "100", "log.cleaner.io.max.bytes.per.second": "300000",
            "log.cleaner.io.buffer.size": "16384", "worker.restart.backoff.ms": "200",
            "worker.restart.backoff.max.ms": "500",
            "file.delete.delay.ms": "1000"}) as running:
        yield running


class SteadyProducer(threading.Thread):
    """One update every few ms for the whole test, through the kills (librdkafka retries).

    A batch in flight at a kill may be in the log while its acknowledgement waits for the
    producer to reconnect (its backoff grows with each kill), and the next round's writer,
    a new producer, acknowledges records above it meanwhile: `await_reports` lets a round
    wait for the reports of everything sent before its kill, so that what it reads up to
    the last acknowledged offset is all acknowledged."""

    def __init__(self, bootstrap):
        super().__init__(daemon=True)
        self.written, self.errors, self.stop = {}, [], threading.Event()
        self.sent = self.reported = 0
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2,
                                  "batch.size": 16384,
                                  "enable.idempotence": True, "message.timeout.ms": 60_000})

    def run(self):
        n = 0
        while not self.stop.is_set():
            key = f"steady-{n % 20}".encode()
            value = f"steady-{n}".encode()

            def delivered(err, msg):
                if err is not None:
                    self.errors.append(err)
                else:
                    self.written[msg.offset()] = (msg.offset(), msg.key(), msg.value())
                self.reported += 1
            self.producer.produce(TOPIC, key=key, value=value, partition=0,
                                  on_delivery=delivered)
            self.sent += 1
            self.producer.poll(0.005)
            n += 1
        self.producer.flush(60)

    def await_reports(self, sent: int, timeout: float = 90) -> None:
        """Until the first `sent` messages have their delivery reports (within
        message.timeout.ms of being sent each has one, if only an error)."""
        deadline = time.monotonic() + timeout
        while self.reported < sent:
            assert time.monotonic() < deadline, (
                f"{sent - self.reported} message(s) sent before the kill without a report")
            time.sleep(0.01)


def _swap_files(directory) -> list[str]:
    return [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]


def _kill_rounds(appliance, steady, directory) -> tuple[dict, int]:
    """ROUNDS kills of the worker at seeded moments of cleaning, each checked after the
    restart; returns what write_updates acknowledged and how many kills caught a
    cleaning's files on disk."""
    rng = random.Random(24)
    written, caught = {}, 0
    for round_ in range(ROUNDS):
        written.update(write_updates(appliance.bootstrap, TOPIC, 5_000, 300, seed=round_))
        # segment.ms: the steady producer's next append rolls; then the cleaner runs, and
        # once it writes a cleaned segment the worker dies a seeded moment later
        deadline = time.monotonic() + 10
        while not _swap_files(directory) and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.08))
        caught += bool(_swap_files(directory))
        pid = appliance.worker_pid(0)
        os.kill(pid, signal.SIGKILL)
        sent_before_kill = steady.sent
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if appliance.worker_pid(0) not in (0, pid) and appliance._all_serving():
                    break
            except (KeyError, AssertionError):
                pass
            time.sleep(0.1)
        else:
            pytest.fail("the worker did not come back")
        steady.await_reports(sent_before_kill)
        everything = {**written, **steady.written}
        end = max(everything) + 1
        got = read_confluent(appliance.bootstrap, TOPIC, end)
        try:
            assert_compacted_view(got, everything)
        except AssertionError as exc:
            raise AssertionError(f"after kill {round_ + 1}: {exc}; the steady producer's "
                                 f"errors: {steady.errors[:3]}") from None
        seen = {r[1]: r for r in got}
        for key, record in latest_by_key(written).items():
            assert seen[key][0] >= record[0], key  # its last value, or a later steady one
    return written, caught


def test_kill_9_at_seeded_moments_of_cleaning(appliance):
    admin = AdminClient({"bootstrap.servers": appliance.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": str(128 * 1024), "segment.ms": "1000",
        "min.cleanable.dirty.ratio": "0.05"})])[TOPIC].result(30)
    directory = appliance.log_dirs[0] / f"{TOPIC}-0"
    steady = SteadyProducer(appliance.bootstrap)
    steady.start()
    try:
        written, caught = _kill_rounds(appliance, steady, directory)
    finally:  # a failed round must not leave the producer retrying for the session
        steady.stop.set()
        steady.join(90)
    assert not steady.errors, steady.errors[:3]
    time.sleep(1.1)  # segment.ms, then one more update rolls the rest into a sealed segment
    written.update(write_updates(appliance.bootstrap, TOPIC, 1, 1, seed=99, prefix="last-"))
    everything = {**written, **steady.written}
    end = max(everything) + 1
    deadline = time.monotonic() + 60  # and the cleaner finishes after all that
    while cleaner_checkpoint.read(appliance.log_dirs[0]).get((TOPIC, 0), -1) < end - 1:
        assert time.monotonic() < deadline, "the cleaner did not finish"
        time.sleep(0.2)
    got = read_confluent(appliance.bootstrap, TOPIC, end)
    assert_compacted_view(got, everything)
    latest = latest_by_key({o: r for o, r in everything.items() if o < end - 1})
    below = [r for r in got if r[0] < end - 1]
    assert {r[1]: r for r in below} == latest
    assert len(below) == len({r[1] for r in below})  # nothing superseded is left
    print(f"{ROUNDS} kills, {caught} with a cleaning's files on disk; {len(everything)} "
          f"records written, {len(got)} left")
    assert caught >= ROUNDS // 2
