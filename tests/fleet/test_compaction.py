"""A compacted topic of replication factor 3 across three real appliances (one worker each)
and a real ZooKeeper: confluent-kafka writes updates with acks=all; every replica's own
cleaner compacts its copy (followers take the leader's batches as they are, cleaning happens
on each side alone), and all three end with the same keys, each at its original offset with
its last value; a consumer of the leader reads the same."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.segments import cleaner_checkpoint
from klog.protocol.record_batch import HEADER_BYTES
from klog.protocol.records import decode_batch
from tests.compaction.clients import (
    assert_compacted_view,
    latest_by_key,
    read_confluent,
    write_updates,
)
from tests.fleet.harness import FleetSpec, led
from tests.polling import wait_until

pytestmark = pytest.mark.interop

TOPIC = "fleet-changelog"
FLEET = FleetSpec("/klog-compaction", log_dirs=1, settings={
    "default.replication.factor": "3", "log.cleaner.backoff.ms": "200"})


def _replica_records(appliance) -> list[tuple]:
    """(offset, key, value) of every record of this appliance's replica, from its files."""
    directory = Path(appliance.log_dirs[0]) / f"{TOPIC}-0"
    records = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + HEADER_BYTES <= len(data) and any(data[pos:pos + HEADER_BYTES]):
            header, batch = decode_batch(data, pos)  # the active segment ends in zeros
            records += [(r.offset, r.key, r.value) for r in batch]
            pos += header.size
    return records


def _cleaned_through(appliance) -> int:
    return cleaner_checkpoint.read(appliance.log_dirs[0]).get((TOPIC, 0), -1)


def test_replicas_clean_on_their_own_and_serve_the_same_keys(fleet):
    bootstrap = fleet[0].bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={
        "cleanup.policy": "compact", "segment.bytes": str(64 * 1024), "segment.ms": "1500",
        "min.cleanable.dirty.ratio": "0.05", "min.insync.replicas": "2"})])[TOPIC].result(30)
    wait_until(lambda: led(bootstrap, TOPIC, 1), 30, "a leader")
    written = write_updates(bootstrap, TOPIC, 20_000, 200, seed=5)
    time.sleep(1.6)  # segment.ms: the next append rolls every replica's active segment
    written.update(write_updates(bootstrap, TOPIC, 1, 1, seed=6, prefix="last-"))
    end = max(written) + 1
    wait_until(lambda: all(_cleaned_through(a) >= end - 1 for a in fleet), 60,
               "every replica cleaned through the updates")
    copies = [[r for r in _replica_records(a) if r[0] < end - 1] for a in fleet]
    latest = latest_by_key({o: r for o, r in written.items() if o < end - 1})
    for copy in copies:
        assert_compacted_view(copy, written)
        assert {r[1]: r for r in copy} == latest
        assert len(copy) == len(latest)  # one record per key: each replica cleaned
    assert copies[0] == copies[1] == copies[2]
    got = read_confluent(bootstrap, TOPIC, end)
    assert [r for r in got if r[0] < end - 1] == copies[0]
