"""Exactly-once through kill -9 (issue 23's acceptance): a confluent-kafka
consume-transform-produce loop (``transactional.id``, ``send_offsets_to_transaction`` with
the consumer's group metadata, a read_committed input consumer) over an input of three
partitions, while, at seeded random points, the loop process is killed with -9
(mid-transaction), the whole appliance is killed with -9 (at a random point, and right after
a ``commit_transaction`` returned: between EndTxn and the markers) and a worker is killed
with -9; each is restarted. A read_committed consumer of the output then sees every input
record transformed exactly once, in per-partition order.

The seed is printed; ``KLOG_EOS_SEED`` replays one. One appliance for the module.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from tests.conftest import FAST_GROUPS, Appliance, topic_maker
from tests.transactions.coordinator_helpers import SETTINGS
from tests.transactions.exactly_once_helpers import (
    QUICK_SESSIONS,
    Loop,
    appliance_pids,
    drain,
    expected,
    feed,
    first_difference,
    kill_9,
    wait_gone,
)

PARTITIONS = 3
PER_PARTITION = 200
SEED = int(os.environ.get("KLOG_EOS_SEED", random.randrange(1 << 30)))


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    started = Appliance(tmp_path_factory.mktemp("eos"), log_dirs=2,
                        settings={**SETTINGS, **FAST_GROUPS, **QUICK_SESSIONS}).start()
    try:
        yield started
    finally:
        started.stop()


def _kill_appliance_after_a_commit(appliance: Appliance, loop: Loop) -> None:
    """A new loop SIGKILLs the appliance as soon as its first commit_transaction returns."""
    pids = appliance_pids(appliance)
    loop.kill()
    loop.start(kill_after_commit=pids)
    deadline = time.monotonic() + 60
    while appliance.process.poll() is None:
        assert time.monotonic() < deadline, "the loop never committed:\n" + loop.tail()
        if not loop.alive():
            loop.start(kill_after_commit=pids)
        time.sleep(0.02)
    appliance.stop()
    wait_gone(pids)
    appliance.start()


def test_every_record_exactly_once_through_kill_9s(appliance, tmp_path):
    print(f"KLOG_EOS_SEED={SEED}")
    rng = random.Random(SEED)
    make = topic_maker(appliance.bootstrap, partitions=PARTITIONS, prefix="eos")
    source, sink = make(), make()
    feed(appliance.bootstrap, source, PARTITIONS, PER_PARTITION)
    loop = Loop(tmp_path, appliance.bootstrap, source, sink, "eos-group", "eos-txn",
                batch=rng.randint(4, 9), pause=0.01).start()
    events = ["loop", "loop", "appliance", "after_commit", "worker"]
    rng.shuffle(events)
    started = time.monotonic()
    try:
        for event in events:
            loop.wait_commits(rng.randint(2, 5))
            time.sleep(rng.uniform(0, 0.05))  # somewhere inside the next transaction
            print(f"{time.monotonic() - started:6.2f} s: kill -9 {event}")
            if event == "loop":
                loop.kill()
                loop.start()
            elif event == "appliance":
                kill_9(appliance)
                appliance.start()
            elif event == "after_commit":
                _kill_appliance_after_a_commit(appliance, loop)
            else:
                os.kill(appliance.worker_pid(rng.randrange(2)), signal.SIGKILL)
            loop.ensure_running()
        seen = drain(loop, appliance.bootstrap, sink, PARTITIONS, PARTITIONS * PER_PARTITION)
        wrong = first_difference(seen, expected(PARTITIONS, PER_PARTITION))
        assert not wrong, f"{wrong} (seed {SEED}); the loop's last run:\n{loop.tail()}"
        print(f"exactly once after {loop.runs} loop runs, {time.monotonic() - started:.1f} s")
    finally:
        loop.kill()
