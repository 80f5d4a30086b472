"""`klog configs alter|describe --entity-type clients|users` (kafka-configs' shape for client
quotas) against a running appliance, in-process through klog_cli.main."""

from __future__ import annotations

import orjson
import pytest

from klog_cli.main import main
from tests.conftest import running_appliance


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("quotas-cli")) as started:
        yield started


def klog_cmd(appliance, capsys, *argv):
    code = main(["configs", "--bootstrap-server", appliance.bootstrap, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_alter_and_describe_client_and_user_quotas(appliance, capsys):
    code, out, err = klog_cmd(appliance, capsys, "alter", "--entity-type", "clients",
                              "--entity-name", "c1", "--add-config",
                              "producer_byte_rate=1048576,consumer_byte_rate=2048")
    assert code == 0, err
    assert "Completed updating config for client-id 'c1'." in out
    code, out, err = klog_cmd(appliance, capsys, "alter", "--entity-type", "clients",
                              "--entity-default", "--user", "alice",
                              "--add-config", "request_percentage=50")
    assert code == 0, err
    assert "user-principal 'alice', the default client-id" in out
    code, out, _ = klog_cmd(appliance, capsys, "describe", "--entity-type", "clients",
                            "--entity-name", "c1")
    assert out.strip() == ("Quota configs for client-id 'c1' are "
                           "consumer_byte_rate=2048.0, producer_byte_rate=1048576.0")
    code, out, _ = klog_cmd(appliance, capsys, "describe", "--entity-type", "clients",
                            "--entity-default", "--user", "alice", "--json")
    assert orjson.loads(out) == [{"entity": {"user": "alice", "client-id": None},
                                  "values": {"request_percentage": 50.0}}]
    code, out, _ = klog_cmd(appliance, capsys, "alter", "--entity-type", "clients",
                            "--entity-name", "c1", "--delete-config", "consumer_byte_rate")
    assert code == 0
    # no name: every named client id (Kafka's "any specified name": not the defaults)
    code, out, _ = klog_cmd(appliance, capsys, "describe", "--entity-type", "clients")
    assert out.strip() == "Quota configs for client-id 'c1' are producer_byte_rate=1048576.0"


def test_bad_quotas_are_refused_with_kafkas_error(appliance, capsys):
    code, _, err = klog_cmd(appliance, capsys, "alter", "--entity-type", "users",
                            "--entity-name", "bob", "--add-config", "producer_byte_rate=-5")
    assert code == 1 and "INVALID_REQUEST" in err
    code, _, err = klog_cmd(appliance, capsys, "alter", "--entity-type", "users",
                            "--entity-name", "bob", "--add-config", "bogus_rate=5")
    assert code == 1 and "INVALID_REQUEST" in err and "bogus_rate" in err
    code, out, _ = klog_cmd(appliance, capsys, "describe", "--entity-type", "users",
                            "--entity-name", "bob")
    assert code == 0 and out == ""
