"""`klog produce` and `klog consume` as subprocesses against a real appliance."""

from __future__ import annotations

import subprocess
import sys

import pytest

import klog
from tests.client.conftest import read_all
from tests.conftest import REPO


def klog_cli(*args, stdin: bytes = b"", timeout: float = 60):
    return subprocess.run([sys.executable, "-m", "klog_cli.main", *args], input=stdin, cwd=REPO,
                          capture_output=True, timeout=timeout)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_produce_lines_with_keys_then_consume_with_a_format(broker, topic_factory, codec):
    topic = topic_factory(3)
    lines = b"".join(b"user-%d\tclick %d\n" % (i % 7, i) for i in range(500))
    done = klog_cli("produce", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                    "--key-separator", "\t", "--compression", codec, "--acks", "all",
                    stdin=lines)
    assert done.returncode == 0, done.stderr.decode()
    got = read_all(broker.bootstrap, topic, 500)
    assert sorted((r.key, r.value) for r in got) == sorted(
        (b"user-%d" % (i % 7), b"click %d" % i) for i in range(500))

    printed = klog_cli("consume", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                       "--from-beginning", "--exit", "--format", r"%t|%p|%o|%k|%s|%T\n")
    assert printed.returncode == 0, printed.stderr.decode()
    rows = {tuple(line.split(b"|")) for line in printed.stdout.splitlines()}
    assert rows == {(topic.encode(), b"%d" % r.partition, b"%d" % r.offset, r.key, r.value,
                     b"%d" % r.timestamp) for r in got}


def test_consume_offset_partition_and_max_messages(broker, topic_factory):
    topic = topic_factory(2)
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        producer.send_batch(topic, [b"m%d" % i for i in range(10)], partition=1)
    printed = klog_cli("consume", "-b", broker.bootstrap, "-t", topic, "--partition", "1",
                       "--offset", "4", "--max-messages", "3")
    assert printed.returncode == 0, printed.stderr.decode()
    assert printed.stdout == b"m4\nm5\nm6\n"
    headers = klog_cli("consume", "-b", broker.bootstrap, "-t", topic, "--from-beginning",
                       "-e", "-f", r"%o:%S\n", "-p", "1")
    assert headers.stdout.splitlines()[:2] == [b"0:2", b"1:2"]


def test_errors_are_a_message_and_a_status_not_a_traceback(broker, topic_factory):
    missing = klog_cli("consume", "-b", broker.bootstrap, "-t", "no-such-topic", "-e")
    assert missing.returncode == 1
    assert b"UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr and b"Traceback" not in missing.stderr
    topic = topic_factory(1)
    bad_line = klog_cli("produce", "-b", broker.bootstrap, "-t", topic, "--key-separator", ":",
                        stdin=b"k:v\nno separator\n")
    assert bad_line.returncode == 1 and b"line 2" in bad_line.stderr
    assert b"Traceback" not in bad_line.stderr
    no_partition = klog_cli("consume", "-b", broker.bootstrap, "-t", topic, "-p", "5", "-e")
    assert no_partition.returncode == 1 and b"no partition 5" in no_partition.stderr
