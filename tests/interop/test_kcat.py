"""kcat (Debian's 1.7.1, librdkafka 2.0.2) against a real worker: produce, consume, -Q."""

from __future__ import annotations

import subprocess
import time
from collections import defaultdict

import pytest

from tests.conftest import require_binary
from tests.interop.helpers import create_topic

pytestmark = pytest.mark.interop
MESSAGES = 100_000
KEYS = 1000


def kcat(*args, input_text=None, timeout=120):
    binary = require_binary("kcat")
    result = subprocess.run([binary, *args], input=input_text, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"kcat {args} failed: {result.stderr[-2000:]}"
    return result.stdout


def produce_lines(bootstrap, topic, lines, *extra):
    kcat("-b", bootstrap, "-P", "-t", topic, "-K", ":", "-X", "linger.ms=20", *extra,
         input_text="".join(lines))


def consume_all(bootstrap, topic):
    out = kcat("-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
               "-f", "%p %o %k %s\n")
    rows = []
    for line in out.splitlines():
        partition, offset, key, value = line.split(" ")
        rows.append((int(partition), int(offset), key, value))
    return rows


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_round_trip_keeps_keys_values_and_partition_order(appliance, codec):
    topic = f"kcat-{codec}"
    create_topic(appliance.bootstrap, topic, 6)
    lines = [f"k{i % KEYS}:v{i}\n" for i in range(MESSAGES)]
    produce_lines(appliance.bootstrap, topic, lines, "-z", codec)
    rows = consume_all(appliance.bootstrap, topic)

    assert len(rows) == MESSAGES
    assert sorted((k, v) for _, _, k, v in rows) == sorted(
        (f"k{i % KEYS}", f"v{i}") for i in range(MESSAGES))
    by_partition = defaultdict(list)
    partitions_of_key = defaultdict(set)
    for partition, offset, key, value in rows:
        by_partition[partition].append((offset, key, int(value[1:])))
        partitions_of_key[key].add(partition)
    assert len(by_partition) == 6, "keys should spread over all six partitions"
    assert all(len(p) == 1 for p in partitions_of_key.values()), "a key moved partitions"
    for entries in by_partition.values():
        offsets = [o for o, _, _ in entries]
        assert offsets == list(range(len(entries))), "offsets must be dense from 0"
        last_seen = {}
        for _, key, sequence in entries:
            assert sequence > last_seen.get(key, -1), "per-key order broken"
            last_seen[key] = sequence


def test_kcat_offsets_for_times(appliance):
    topic = "kcat-times"
    create_topic(appliance.bootstrap, topic, 2)
    produce_lines(appliance.bootstrap, topic, [f"a{i}:early{i}\n" for i in range(200)])
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    produce_lines(appliance.bootstrap, topic, [f"b{i}:late{i}\n" for i in range(200)])
    rows = consume_all(appliance.bootstrap, topic)
    first_late = {}
    for partition, offset, _, value in rows:
        if value.startswith("late"):
            first_late[partition] = min(offset, first_late.get(partition, offset))
    out = kcat("-b", appliance.bootstrap, "-Q", "-t", f"{topic}:0:{boundary_ms}",
               "-t", f"{topic}:1:{boundary_ms}")
    answered = {}
    for line in out.splitlines():
        # "clicks [0] offset 123"
        parts = line.split()
        answered[int(parts[1].strip("[]"))] = int(parts[-1])
    assert answered == first_late
