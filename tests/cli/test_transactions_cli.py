"""`klog transactions list|describe` and the transaction part of `klog status` (each
partition's LSO, the partitions an open transaction holds back), against a real appliance
and a transaction held open by klog's own transactional producer. The command runs in this
process (`klog_cli.main.main`): a subprocess per call would cost a second of imports each."""

from __future__ import annotations

import time

import orjson
import pytest

import klog
from klog_cli.main import main
from tests.conftest import running_appliance, topic_maker
from tests.transactions.coordinator_helpers import SETTINGS

TIMEOUT = 20


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("txn-cli"), settings=SETTINGS) as started:
        yield started


class Run:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def klog_cli(capsys):
    def run(*args) -> Run:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


@pytest.fixture
def transactions(klog_cli, appliance):
    return lambda *args: klog_cli("transactions", "--bootstrap-server", appliance.bootstrap,
                                  *args)


def test_list_describe_and_status_of_an_open_then_committed_transaction(appliance, klog_cli,
                                                                        transactions):
    topic = topic_maker(appliance.bootstrap, partitions=2, prefix="txn-cli")()
    with klog.Producer(bootstrap_servers=appliance.bootstrap, transactional_id="cli-open",
                       linger_ms=0) as producer:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.send(topic, b"before", partition=0).result(TIMEOUT)
        producer.send(topic, b"open-1", partition=1).result(TIMEOUT)

        listed = orjson.loads(transactions("list", "--open", "--json").stdout)
        assert [(t["transactional_id"], t["state"]) for t in listed] == \
            [("cli-open", "Ongoing")]
        described = orjson.loads(transactions("describe", "cli-open", "--json").stdout)
        assert described["state"] == "Ongoing"
        assert described["partitions"] == [{"topic": topic, "partition": 0},
                                           {"topic": topic, "partition": 1}]
        assert described["timeout_ms"] == 60_000 and described["open_ms"] >= 0
        text = transactions("describe", "cli-open").stdout
        assert "Ongoing" in text and f"{topic}[0,1]" in text

        held = _status_open(klog_cli, appliance, lambda rows: len(rows) == 2)
        assert sorted((r["partition"], r["last_stable_offset"], r["high_watermark"])
                      for r in held if r["topic"] == topic) == [(0, 0, 1), (1, 0, 1)]
        table = klog_cli("status", "--config", str(appliance.config), "--interval", "0").stdout
        assert "LSO" in table and "Open transactions" in table
        producer.commit_transaction(TIMEOUT)

    assert _status_open(klog_cli, appliance, lambda rows: not rows) == []
    listed = orjson.loads(transactions("list", "--json").stdout)
    assert ("cli-open", "CompleteCommit") in [(t["transactional_id"], t["state"])
                                              for t in listed]
    assert "cli-open" in transactions("list").stdout


def test_describe_an_unknown_id_is_one_line_and_a_status(transactions):
    result = transactions("describe", "nobody-has-this-id")
    assert result.returncode == 1
    assert "does not exist" in result.stderr and len(result.stderr.splitlines()) == 1


def _status_open(klog_cli, appliance, done) -> list[dict]:
    """`klog status --json`'s open transactions, once ``done(rows)`` (the shm index is
    published by the workers a moment after the write)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        result = klog_cli("status", "--config", str(appliance.config), "--json",
                          "--interval", "0")
        rows = orjson.loads(result.stdout)["open_transactions"]
        if done(rows):
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)


def test_consume_read_committed_skips_an_aborted_transaction(appliance, klog_cli):
    topic = topic_maker(appliance.bootstrap, partitions=1, prefix="txn-consume")()
    with klog.Producer(bootstrap_servers=appliance.bootstrap, transactional_id="cli-consume",
                       linger_ms=0) as producer:
        producer.init_transactions(TIMEOUT)
        for value, commit in ((b"one", True), (b"gone", False), (b"two", True)):
            producer.begin_transaction()
            producer.send(topic, value, partition=0)
            producer.flush(TIMEOUT)
            (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT)
    args = ["consume", "-b", appliance.bootstrap, "-t", topic, "--from-beginning", "--exit"]
    assert klog_cli(*args, "--isolation-level", "read_committed").stdout.split() == \
        ["one", "two"]
    assert klog_cli(*args).stdout.split() == ["one", "gone", "two"]
