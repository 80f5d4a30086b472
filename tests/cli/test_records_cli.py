"""`klog records delete` (kafka-delete-records' shape): a JSON offsets file and the simple
flags, Kafka's output lines, errors as one line and status 1, nothing changed on bad input."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest
from confluent_kafka import Producer

import klog
from tests.conftest import REPO, running_appliance

RECORDS = 20


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("records-cli"), log_dirs=2) as started:
        yield started


def records(appliance, *args):
    return subprocess.run([sys.executable, "-m", "klog_cli.main", "records",
                           "--bootstrap-server", appliance.bootstrap, "delete", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=60)


def make_topic(appliance, name: str) -> str:
    with klog.Admin(appliance.bootstrap) as admin:
        admin.create_topic(name, 2)
    producer = Producer({"bootstrap.servers": appliance.bootstrap, "linger.ms": 0})
    for p in (0, 1):
        for i in range(RECORDS):
            producer.produce(name, value=b"%d" % i, partition=p)
    assert producer.flush(10) == 0
    return name


def earliest(appliance, topic):
    with klog.Admin(appliance.bootstrap) as admin:
        return admin.list_offsets(topic, klog.admin.EARLIEST)


def test_a_json_offsets_file_and_the_flags(appliance, tmp_path):
    topic = make_topic(appliance, "rc-a")
    spec = tmp_path / "offsets.json"
    spec.write_bytes(orjson.dumps({"partitions": [
        {"topic": topic, "partition": 0, "offset": 4},
        {"topic": topic, "partition": 1, "offset": 9}], "version": 1}))
    done = records(appliance, "--offset-json-file", str(spec))
    assert done.returncode == 0, done.stderr
    assert "Records delete operation completed:" in done.stdout
    assert f"partition: {topic}-0\tlow_watermark: 4" in done.stdout
    assert f"partition: {topic}-1\tlow_watermark: 9" in done.stdout
    flags = records(appliance, "--topic", topic, "--partitions", "0", "--offset", "6")
    assert flags.returncode == 0 and f"{topic}-0\tlow_watermark: 6" in flags.stdout
    everything = records(appliance, "--topic", topic, "--offset", "-1")  # the high watermark
    assert everything.returncode == 0, everything.stderr
    assert earliest(appliance, topic) == {0: RECORDS, 1: RECORDS}


def test_bad_input_changes_nothing(appliance, tmp_path):
    topic = make_topic(appliance, "rc-b")
    beyond = records(appliance, "--topic", topic, "--partitions", "0,1", "--offset",
                     str(RECORDS + 1))
    assert beyond.returncode == 1 and beyond.stdout.count("OFFSET_OUT_OF_RANGE") == 2
    unknown = records(appliance, "--topic", topic, "--partitions", "5", "--offset", "1")
    assert unknown.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in unknown.stdout
    negative = records(appliance, "--topic", topic, "--offset", "-3")
    assert negative.returncode == 1 and negative.stderr.startswith("klog: offset -3")
    spec = tmp_path / "bad.json"
    spec.write_bytes(orjson.dumps({"partitions": [{"topic": topic, "partition": 0}]}))
    bad = records(appliance, "--offset-json-file", str(spec))
    assert bad.returncode == 1 and "Kafka's shape" in bad.stderr
    assert "Traceback" not in bad.stderr + negative.stderr
    assert earliest(appliance, topic) == {0: 0, 1: 0}
