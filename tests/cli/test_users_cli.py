"""`klog users add|remove|list` on an appliance that never started: the file it writes is
private, salted (the password is nowhere in it), and a worker's view of it (the
ScramCredentialFile) sees each change at the next lookup."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from appliance.scram_credentials import ScramCredentialFile, credentials_path
from klog.protocol.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from klog.protocol.sasl.client import new_client
from klog.protocol.sasl.scram import ScramServer
from tests.conftest import REPO

PASSWORD = "correct horse battery staple"


def klog_users(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "klog_cli.main", "users", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60, input=stdin)


def setup(tmp_path):
    logs = tmp_path / "logs"
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={logs},{tmp_path / 'logs2'}\n"
                      "listeners=SASL_PLAINTEXT://127.0.0.1:19092\n"
                      "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256\n")
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    return config, secret, credentials_path(logs)


def authenticates(view, mechanism, user, password) -> bool:
    server = ScramServer(mechanism, lambda name: view.lookup(name, mechanism), "srv")
    client = new_client(mechanism, user, password, "cli")
    try:
        final = client.respond(server.respond(client.first()))
        server.respond(final)
    except Exception:
        return False
    return server.complete


def test_add_list_remove_before_the_appliance_starts(tmp_path):
    config, secret, path = setup(tmp_path)
    view = ScramCredentialFile(path)
    assert not authenticates(view, SCRAM_SHA_512, "alice", PASSWORD)

    result = klog_users("add", "alice", "--mechanism", "scram-sha-512", "--password-file",
                        str(secret), "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = path.read_text()
    assert PASSWORD not in text
    stored = json.loads(text)["users"]["alice"]["SCRAM-SHA-512"]
    assert set(stored) == {"salt", "iterations", "stored_key", "server_key"}
    assert authenticates(view, SCRAM_SHA_512, "alice", PASSWORD)
    assert not authenticates(view, SCRAM_SHA_512, "alice", PASSWORD + "!")
    assert not authenticates(view, SCRAM_SHA_256, "alice", PASSWORD)

    result = klog_users("add", "bob", "--mechanism", "SCRAM-SHA-256", "--password-file", "-",
                        "--iterations", "8192", "--config", str(config), stdin="bobpw\n")
    assert result.returncode == 0, result.stderr
    assert authenticates(view, SCRAM_SHA_256, "bob", "bobpw")

    listed = klog_users("list", "--config", str(config))
    assert listed.stdout.splitlines() == ["alice\tSCRAM-SHA-512\titerations=4096",
                                          "bob\tSCRAM-SHA-256\titerations=8192"]

    assert klog_users("remove", "alice", "--config", str(config)).returncode == 0
    assert not authenticates(view, SCRAM_SHA_512, "alice", PASSWORD)
    assert authenticates(view, SCRAM_SHA_256, "bob", "bobpw")
    again = klog_users("remove", "alice", "--config", str(config))
    assert again.returncode == 1 and "no credentials" in again.stderr


def test_a_new_password_replaces_the_old(tmp_path):
    config, secret, path = setup(tmp_path)
    view = ScramCredentialFile(path)
    klog_users("add", "alice", "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret),
               "--config", str(config))
    assert authenticates(view, SCRAM_SHA_512, "alice", PASSWORD)
    secret.write_text("new one\n")
    klog_users("add", "alice", "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret),
               "--config", str(config))
    assert not authenticates(view, SCRAM_SHA_512, "alice", PASSWORD)
    assert authenticates(view, SCRAM_SHA_512, "alice", "new one")


def test_refusals(tmp_path):
    config, secret, path = setup(tmp_path)
    low = klog_users("add", "a", "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret),
                     "--iterations", "1000", "--config", str(config))
    assert low.returncode == 1 and "4096" in low.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    none = klog_users("add", "a", "--mechanism", "SCRAM-SHA-512", "--password-file",
                      str(empty), "--config", str(config))
    assert none.returncode == 1 and "no password" in none.stderr
    plain = klog_users("add", "a", "--mechanism", "PLAIN", "--password-file", str(secret),
                       "--config", str(config))
    assert plain.returncode == 2
    assert not path.exists()


def test_a_damaged_file_keeps_the_last_good_credentials(tmp_path):
    config, secret, path = setup(tmp_path)
    view = ScramCredentialFile(path)
    klog_users("add", "alice", "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret),
               "--config", str(config))
    assert authenticates(view, SCRAM_SHA_512, "alice", PASSWORD)
    path.write_text("{not json")
    assert authenticates(view, SCRAM_SHA_512, "alice", PASSWORD)
    assert klog_users("list", "--config", str(config)).returncode == 1
