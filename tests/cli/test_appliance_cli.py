"""`klog appliance run` start-up errors and `klog topics` against a real appliance."""

from __future__ import annotations

import subprocess
import sys

import orjson

from tests.conftest import REPO


def klog(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "klog_cli.main", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def test_an_unknown_key_stops_start_up_naming_the_key(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={tmp_path}/d\nlog.retension.hours=3\n")
    result = klog("appliance", "run", "--config", str(config))
    assert result.returncode == 2
    assert "log.retension.hours" in result.stderr and "unknown key" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_value_and_a_bad_override_name_their_keys(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={tmp_path}/d\nnum.partitions=many\n")
    result = klog("appliance", "run", "--config", str(config))
    assert result.returncode == 2 and "num.partitions" in result.stderr
    config.write_text(f"log.dirs={tmp_path}/d\n")
    result = klog("appliance", "run", "--config", str(config), "--override",
                  "log.segment.bytes=12")
    assert result.returncode == 2 and "segment.bytes" in result.stderr


def test_topics_create_list_describe_delete(appliance):
    bootstrap = ["--bootstrap-server", appliance.bootstrap]
    created = klog("topics", *bootstrap, "create", "orders", "--partitions", "3",
                   "--config", "retention.ms=60000")
    assert created.returncode == 0, created.stderr
    assert "orders" in klog("topics", *bootstrap, "list").stdout.split()
    described = klog("topics", *bootstrap, "describe", "orders", "--json")
    assert described.returncode == 0, described.stderr
    topic = orjson.loads(described.stdout)
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2]
    assert topic["configs"]["retention.ms"] == "60000"

    again = klog("topics", *bootstrap, "create", "orders")
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    bad = klog("topics", *bootstrap, "create", "x", "--config", "cleanup.policy=shrink")
    assert bad.returncode == 1 and "cleanup.policy" in bad.stderr

    assert klog("topics", *bootstrap, "delete", "orders").returncode == 0
    assert "orders" not in klog("topics", *bootstrap, "list").stdout.split()
    missing = klog("topics", *bootstrap, "describe", "orders")
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr


def test_topic_configs_and_added_partitions_survive_a_restart(appliance):
    bootstrap = ["--bootstrap-server", appliance.bootstrap]
    assert klog("topics", *bootstrap, "create", "kept", "--partitions", "1", "--config",
                "segment.bytes=1048576").returncode == 0
    grown = klog("topics", *bootstrap, "alter", "kept", "--partitions", "2")
    assert grown.returncode == 0 and "now has 2 partitions" in grown.stdout, grown.stderr
    shrink = klog("topics", *bootstrap, "alter", "kept", "--partitions", "1")
    assert shrink.returncode == 1 and "INVALID_PARTITIONS" in shrink.stderr
    appliance.stop()
    appliance.start()
    described = orjson.loads(klog("topics", *bootstrap, "describe", "kept", "--json").stdout)
    assert described["configs"]["segment.bytes"] == "1048576"
    assert len(described["partitions"]) == 2
