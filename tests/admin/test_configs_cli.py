"""`klog topics alter --config` and `klog configs describe|alter` (kafka-configs' shape)
against a running appliance, in-process through klog_cli.main; and --add-config's syntax."""

from __future__ import annotations

import orjson
import pytest

import klog
from klog_cli.configs import parse_add_config
from klog_cli.main import main
from tests.conftest import running_appliance


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("configs-cli")) as started:
        with klog.Admin(started.bootstrap) as admin:
            admin.create_topic("cli-topic", 1)
        yield started


def klog_cmd(appliance, capsys, *argv):
    code = main([argv[0], "--bootstrap-server", appliance.bootstrap, *argv[1:]])
    out, err = capsys.readouterr()
    return code, out, err


def test_add_config_syntax_is_kafka_configs():
    assert parse_add_config("retention.ms=1000, cleanup.policy=[compact,delete]") == {
        "retention.ms": "1000", "cleanup.policy": "compact,delete"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_add_config("retention.ms")


def test_topics_alter_config_then_describe(appliance, capsys):
    code, out, _ = klog_cmd(appliance, capsys, "topics", "alter", "cli-topic",
                            "--config", "retention.ms=3000")
    assert code == 0, out
    code, out, _ = klog_cmd(appliance, capsys, "configs", "describe", "--entity-type",
                            "topics", "--entity-name", "cli-topic")
    assert code == 0
    assert "Dynamic configs for topic cli-topic are:" in out
    assert "retention.ms=3000" in out and "DYNAMIC_TOPIC_CONFIG:retention.ms=3000" in out
    code, out, _ = klog_cmd(appliance, capsys, "topics", "alter", "cli-topic",
                            "--delete-config", "retention.ms")
    assert code == 0
    with klog.Admin(appliance.bootstrap) as admin:
        assert admin.topic_configs("cli-topic")["retention.ms"] == "604800000"


def test_configs_alter_brokers_default_and_node(appliance, capsys):
    code, out, err = klog_cmd(appliance, capsys, "configs", "alter", "--entity-type",
                              "brokers", "--entity-default", "--add-config",
                              "log.retention.ms=5000,log.cleaner.backoff.ms=100")
    assert code == 0, err
    assert "Completed updating config for default broker." in out
    code, out, _ = klog_cmd(appliance, capsys, "configs", "describe", "--entity-type",
                            "brokers", "--entity-default")
    assert "log.retention.ms=5000" in out and "log.cleaner.backoff.ms=100" in out
    code, out, _ = klog_cmd(appliance, capsys, "configs", "alter", "--entity-type", "brokers",
                            "--entity-name", "0", "--add-config", "log.retention.ms=6000")
    assert code == 0
    code, out, _ = klog_cmd(appliance, capsys, "configs", "describe", "--entity-type",
                            "brokers", "--entity-name", "0", "--json")
    described = {e["name"]: e for e in orjson.loads(out)}
    assert described["log.retention.ms"]["value"] == "6000"
    assert described["log.retention.ms"]["source"] == "DYNAMIC_BROKER_CONFIG"
    code, out, _ = klog_cmd(appliance, capsys, "configs", "alter", "--entity-type", "brokers",
                            "--entity-default", "--delete-config", "log.retention.ms")
    assert code == 0


def test_bad_input_exits_1_naming_the_key(appliance, capsys):
    code, _, err = klog_cmd(appliance, capsys, "configs", "alter", "--entity-type", "topics",
                            "--entity-name", "cli-topic", "--add-config", "retention.mss=1")
    assert code == 1 and "retention.mss" in err
    code, _, err = klog_cmd(appliance, capsys, "topics", "alter", "cli-topic",
                            "--config", "segment.bytes=huge")
    assert code == 1 and "segment.bytes" in err
    code, _, err = klog_cmd(appliance, capsys, "configs", "alter", "--entity-type", "brokers",
                            "--entity-default", "--add-config", "broker.id=3")
    assert code == 1 and "broker.id" in err
    code, _, err = klog_cmd(appliance, capsys, "configs", "alter", "--entity-type", "topics",
                            "--entity-name", "cli-topic")
    assert code == 1 and "nothing to alter" in err
