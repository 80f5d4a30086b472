"""`klog acls add|remove|list`: with --config on an appliance that is not running (the file
is private, and what it holds is what was asked), and with --bootstrap-server against a
running one with an authorizer (a PLAINTEXT listener: the principal is User:ANONYMOUS, made
a super user) and against one without (Kafka's SECURITY_DISABLED)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from appliance.security.acl_file import acls_path, read_acls
from appliance.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from tests.conftest import REPO, Appliance


def klog_acls(*args):
    return subprocess.run([sys.executable, "-m", "klog_cli.main", "acls", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def setup(tmp_path):
    logs = tmp_path / "logs"
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={logs}\nlisteners=PLAINTEXT://127.0.0.1:19092\n"
                      "authorizer.class.name=kafka.security.authorizer.AclAuthorizer\n")
    return str(config), acls_path(logs)


def test_add_list_remove_in_the_file_of_a_stopped_appliance(tmp_path):
    config, path = setup(tmp_path)
    done = klog_acls("add", "--allow-principal", "User:alice", "--operation", "Write",
                     "--operation", "Describe", "--topic", "a", "--config", config)
    assert done.returncode == 0, done.stderr
    done = klog_acls("add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.1",
                     "--operation", "All", "--topic", "logs-", "--resource-pattern-type",
                     "prefixed", "--config", config)
    assert done.returncode == 0, done.stderr
    assert klog_acls("add", "--allow-principal", "User:ops", "--operation", "ClusterAction",
                     "--cluster", "--config", config).returncode == 0
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_acls(path) == {
        AclBinding(ResourceType.TOPIC, "a", PatternType.LITERAL, "User:alice", "*",
                   Operation.WRITE, Permission.ALLOW),
        AclBinding(ResourceType.TOPIC, "a", PatternType.LITERAL, "User:alice", "*",
                   Operation.DESCRIBE, Permission.ALLOW),
        AclBinding(ResourceType.TOPIC, "logs-", PatternType.PREFIXED, "User:bob", "10.0.0.1",
                   Operation.ALL, Permission.DENY),
        AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:ops", "*",
                   Operation.CLUSTER_ACTION, Permission.ALLOW)}
    listed = klog_acls("list", "--topic", "a", "--config", config).stdout
    assert "name=a, patternType=LITERAL" in listed
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in listed
    assert "logs-" not in listed
    done = klog_acls("remove", "--allow-principal", "User:alice", "--operation", "Write",
                     "--topic", "a", "--config", config)
    assert done.returncode == 0 and "1 ACL(s) removed" in done.stdout
    done = klog_acls("remove", "--topic", "logs-", "--resource-pattern-type", "prefixed",
                     "--config", config)
    assert "1 ACL(s) removed" in done.stdout
    assert {a.operation for a in read_acls(path)} == {Operation.DESCRIBE,
                                                      Operation.CLUSTER_ACTION}
    assert json.loads(path.read_text())["version"] == 1


def test_refusals_name_the_problem(tmp_path):
    config, _ = setup(tmp_path)
    bad = klog_acls("add", "--allow-principal", "alice", "--operation", "Read", "--topic", "a",
                    "--config", config)
    assert bad.returncode == 1 and "TYPE:NAME" in bad.stderr
    bad = klog_acls("add", "--allow-principal", "User:a", "--operation", "Write", "--group",
                    "g", "--config", config)
    assert bad.returncode == 1 and "WRITE does not apply to GROUP" in bad.stderr
    bad = klog_acls("add", "--allow-principal", "User:a", "--topic", "t", "--config", config)
    assert bad.returncode == 1 and "--operation" in bad.stderr


def test_an_unknown_authorizer_class_is_refused_naming_the_key(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={tmp_path / 'logs'}\nauthorizer.class.name=com.example.Mine\n")
    done = subprocess.run([sys.executable, "-m", "klog_cli.main", "appliance", "run",
                           "--config", str(config)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "authorizer.class.name" in done.stderr


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    appliance = Appliance(tmp_path_factory.mktemp("acls-cli"), settings={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"}).start()
    yield appliance
    appliance.stop()


def test_over_the_wire_add_list_remove(secured):
    server = ["--bootstrap-server", secured.bootstrap]
    done = klog_acls("add", "--allow-principal", "User:carol", "--operation", "Read",
                     "--group", "g", *server)
    assert done.returncode == 0, done.stderr
    listed = klog_acls("list", *server).stdout
    assert "resourceType=GROUP, name=g" in listed and "User:carol" in listed
    assert read_acls(acls_path(secured.log_dirs[0])) == {
        AclBinding(ResourceType.GROUP, "g", PatternType.LITERAL, "User:carol", "*",
                   Operation.READ, Permission.ALLOW)}
    running = klog_acls("add", "--allow-principal", "User:x", "--operation", "Read",
                        "--topic", "t", "--config", str(secured.config))
    assert running.returncode == 1 and "running" in running.stderr
    done = klog_acls("remove", "--group", "g", *server)
    assert done.returncode == 0 and "1 ACL(s) removed" in done.stdout
    assert klog_acls("list", *server).stdout.strip() == ""


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(tmp_path):
    appliance = Appliance(tmp_path).start()
    try:
        done = klog_acls("list", "--bootstrap-server", appliance.bootstrap)
        assert done.returncode == 1 and "SECURITY_DISABLED" in done.stderr
    finally:
        appliance.stop()


def test_a_region_left_by_a_kill_no_longer_counts_as_running(tmp_path):
    """After a kill -9 of the supervisor, its workers stop and the shm region stays: the log
    dirs' lock, not the region, says whether the appliance still runs."""
    from appliance.config import load_config
    from appliance.log_dir_lock import try_lock
    from appliance.shm.appliance_region import region_name_for
    from tests.appliance.test_supervisor import shm_names
    from tests.polling import wait_until

    appliance = Appliance(tmp_path, settings={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}).start()
    region = region_name_for(load_config(appliance.config)).lstrip("/")
    log_dir = appliance.log_dirs[0]
    try:
        appliance.kill()

        def lock_free() -> bool:
            fd = try_lock(log_dir)
            if fd is not None:
                os.close(fd)
            return fd is not None
        wait_until(lock_free, timeout_s=30, what="the killed appliance's workers to exit")
        assert region in shm_names(), "the kill left its region behind"
        done = klog_acls("add", "--allow-principal", "User:ops", "--operation", "All",
                         "--cluster", "--config", str(appliance.config))
        assert done.returncode == 0, done.stderr
        assert {a.principal for a in read_acls(acls_path(log_dir))} == {"User:ops"}
    finally:
        appliance.stop()
        if region in shm_names():
            os.unlink(f"/dev/shm/{region}")
