"""The client logs through `logging` under the ``klog`` logger: a rebalance and a failed commit
show up there (against a real appliance), and nothing is printed unless the application
configures logging (a library's NullHandler, as kafka-python)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time

import pytest

import klog
from klog import TopicPartition as TP
from tests.conftest import REPO, free_port

FAST = dict(session_timeout_ms=6000, heartbeat_interval_ms=300, auto_offset_reset="earliest",
            request_timeout_ms=10_000, enable_auto_commit=False)


@pytest.fixture(scope="module")
def broker(group_appliance):
    return group_appliance


def messages(caplog, level=logging.DEBUG) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("klog") and r.levelno >= level]


def test_a_rebalance_and_a_failed_commit_are_logged(broker, caplog):
    caplog.set_level(logging.INFO, logger="klog")
    with klog.Admin(broker.bootstrap) as admin:
        admin.create_topic("logged", 2)
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(20):
            producer.send("logged", b"%d" % i, key=b"%d" % i)
    first = klog.Consumer(bootstrap_servers=broker.bootstrap, group_id="logged",
                          max_poll_interval_ms=3000, **FAST)
    first.subscribe(["logged"])
    deadline = time.monotonic() + 30
    read = 0
    while read < 20 and time.monotonic() < deadline:
        read += sum(len(v) for v in first.poll(200).values())
    assert read == 20
    assert any("joined generation" in m for m in messages(caplog))

    # a second member joins while the first stops polling: the group rebalances without it
    second = klog.Consumer(bootstrap_servers=broker.bootstrap, group_id="logged", **FAST)
    second.subscribe(["logged"])
    stop = threading.Event()

    def keep_polling():
        while not stop.is_set():
            second.poll(100)

    poller = threading.Thread(target=keep_polling, daemon=True)
    poller.start()
    try:
        deadline = time.monotonic() + 30
        while len(second.assignment()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(second.assignment()) == 2, "the second member never took over"
        with pytest.raises(klog.CommitFailedError):
            first.commit({TP("logged", 0): klog.OffsetAndMetadata(5, "")})
    finally:
        stop.set()
        poller.join(10)
    logged = messages(caplog)
    warnings = messages(caplog, logging.WARNING)
    assert any("rebalancing" in m or "lost its membership" in m for m in logged), logged
    assert any("commit of 1 offset(s) for group 'logged' failed" in m for m in warnings), logged
    first.close()
    second.close()


def test_the_library_is_quiet_unless_logging_is_configured():
    port = free_port()  # nothing listens there: the connection fails, at WARNING
    script = ("import klog, logging, sys\n"
              "if sys.argv[1] == 'configured': logging.basicConfig(level=logging.WARNING)\n"
              "try:\n"
              f"    klog.Admin('127.0.0.1:{port}').list_topics()\n"
              "except klog.KlogError:\n"
              "    pass\n")
    quiet = subprocess.run([sys.executable, "-c", script, "quiet"], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    loud = subprocess.run([sys.executable, "-c", script, "configured"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert "cannot connect" not in quiet.stderr, quiet.stderr
    assert f"WARNING:klog.wire:cannot connect to 127.0.0.1:{port}" in loud.stderr, loud.stderr
