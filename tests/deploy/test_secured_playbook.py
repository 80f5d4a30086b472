"""The secured fleet (`klog_security: true`) that playbooks/cluster.yml deploys on the booted hosts.

The hosts (tests/deploy/conftest.py) are wiped and deployed afresh with the inventory's SCRAM
users and ZooKeeper digest, as the example inventory has them: the playbook makes a CA on the
control host and a certificate per appliance, clients and replica fetches use SASL_SSL with
SCRAM-SHA-512, and Kafka's ACLs are on. Then, from outside the hosts: a user of the inventory
with the deployed CA produces (acks=all, so through the replicas' SASL_SSL links) and consumes
in a group once the admin has granted it ACLs with `klog acls` (as the README shows); clients
without the right credentials or CA get nothing; a ZooKeeper client without klog's digest
cannot change klog's znodes nor read its users; a second run changes only the setting it
changed on one host and restarts that appliance only, --check --diff changes nothing, and no
run prints a password. This module deploys first on the booted hosts (conftest.py says why);
the plaintext fleet's module takes the kill and the rolling upgrade.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE

from tests.conftest import REPO
from tests.deploy.playbook import FIGURES, PROPERTIES, inventory, run_playbook, wipe

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(1200)]

PASSWORDS = {"broker": "broker-pw-7Yq2", "admin": "admin-pw-Kd81", "alice": "alice-pw-3xLe"}
DIGEST = "klog:zk-digest-pw-Ue40"
SECURITY = {
    "klog_security": True, "klog_broker_user": "broker", "klog_admin_user": "admin",
    "klog_scram_users": [{"name": name, "password": password, "mechanism": "SCRAM-SHA-512"}
                         for name, password in PASSWORDS.items()],
    "klog_zookeeper_digest": DIGEST,
}


class Secured:
    def __init__(self, booted, inventory_path, pki, first_run):
        self.fleet = booted.fleet
        self.booted = booted
        self.inventory = inventory_path
        self.pki = pki
        self.first_run = first_run
        self.bootstrap = ",".join(f"{h.address}:9092" for h in self.fleet.hosts)
        self.zookeeper = ",".join(f"{h.address}:2181" for h in self.fleet.hosts)

    def ssh(self, host, command: str) -> str:
        return host.ssh(self.fleet.key, command).stdout.strip()

    def client(self, user: str | None = "alice", password: str | None = None, **more) -> dict:
        """librdkafka's settings for SASL_SSL with the deployed CA, hostname verified."""
        config = {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL",
                  "ssl.ca.location": str(self.pki / "ca.crt"),
                  "ssl.endpoint.identification.algorithm": "https",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                  "sasl.password": password or PASSWORDS.get(user, "")}
        return {**config, **more}


@pytest.fixture(scope="module")
def secured(booted):
    wipe(booted.fleet)
    pki = booted.workdir / "pki"
    path = inventory(booted.fleet, booted.workdir / "secured.yml",
                     {**SECURITY, "klog_pki_dir": str(pki)})
    first = run_playbook(path, booted.log, *booted.wheels)
    FIGURES["secured deploy of three hosts (s)"] = first.seconds
    return Secured(booted, path, pki, first)


def klog(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "klog_cli.main", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def wait_until(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_each_appliance_serves_sasl_ssl_with_its_certificate_and_key(secured):
    for host in secured.fleet.hosts:
        props = secured.ssh(host, "cat /etc/klog/server.properties")
        assert f"listeners=SASL_SSL://{host.address}:9092" in props.splitlines()
        assert "inter.broker.listener.name=SASL_SSL" in props.splitlines()
        assert "zookeeper.set.acl=true" in props.splitlines()
        # the key is the klog user's alone; the config (broker password, digest) root's and klog's
        assert secured.ssh(host, "stat -c '%U %a' /etc/klog/tls/keystore.pem") == "klog 600"
        assert secured.ssh(host, "stat -c '%U %G %a' /etc/klog/server.properties") == \
            "root klog 640"
        assert secured.ssh(host, "systemctl is-active klog-appliance zookeeper") == \
            "active\nactive"
        # every worker's port (h1 has two) presents the certificate of this host's names
        context = ssl.create_default_context(cafile=str(secured.pki / "ca.crt"))
        workers = 2 if host.name == "h1" else 1
        for port in range(9092, 9092 + workers):
            with socket.create_connection((host.address, port), timeout=10) as raw, \
                    context.wrap_socket(raw, server_hostname=host.address) as tls:
                names = dict(tls.getpeercert()["subjectAltName"])
                assert names.get("DNS") == host.name and names.get("IP Address") == host.address


def test_a_user_of_the_inventory_produces_and_consumes_with_the_deployed_ca(secured):
    admin = AdminClient(secured.client("admin"))
    admin.create_topics([NewTopic("secured", 6, 3, config={"min.insync.replicas": "2"})]
                        )["secured"].result(60)
    # the README's way: the admin grants alice her topic and her group with `klog acls`
    (secured.pki / "admin.pw").write_text(PASSWORDS["admin"] + "\n")
    common = ["--bootstrap-server", secured.bootstrap.split(",")[1],
              "--security-protocol", "SASL_SSL", "--ssl-cafile", str(secured.pki / "ca.crt"),
              "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-plain-username", "admin",
              "--sasl-plain-password-file", str(secured.pki / "admin.pw")]
    for acl in (["--operation", "Write", "--operation", "Read", "--topic", "secured"],
                ["--operation", "Read", "--group", "readers"]):
        done = klog("acls", "add", "--allow-principal", "User:alice", *acl, *common)
        assert done.returncode == 0, done.stdout + done.stderr

    def leaders_and_full_isrs():
        partitions = admin.list_topics("secured", timeout=10).topics["secured"].partitions
        return len(partitions) == 6 and all(p.leader >= 0 and len(p.isrs) == 3
                                            for p in partitions.values())

    wait_until(leaders_and_full_isrs, 60, "every partition led, with three replicas in sync")

    acked: set[int] = set()
    errors: list = []
    producer = Producer(secured.client("alice", acks="all", **{"enable.idempotence": True,
                                                                 "linger.ms": 5}))
    for value in range(3000):
        producer.produce("secured", str(value).encode(), key=str(value % 31).encode(),
                         on_delivery=lambda e, m: errors.append(e) if e else
                         acked.add(int(m.value())))
        producer.poll(0)
    assert producer.flush(120) == 0
    assert not errors, errors[:5]
    assert len(acked) == 3000
    consumer = Consumer(secured.client("alice", **{"group.id": "readers",
                                                   "auto.offset.reset": "earliest"}))
    consumer.subscribe(["secured"])
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    try:
        while seen != acked and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1):
                assert not message.error(), message.error()
                seen.add(int(message.value()))
    finally:
        consumer.close()
    assert seen == acked
    # acks=all with min.insync.replicas=2: the followers fetched over SASL_SSL as the broker
    wait_until(leaders_and_full_isrs, 60, "the ISRs whole after the writes")


def refusal(config: dict) -> list:
    """What librdkafka reports while it fails to list the topics with `config` (its error
    callback is served by poll, after the listing gave up)."""
    errors: list = []
    client = Producer({**config, "error_cb": errors.append})
    with pytest.raises(KafkaException) as refused:
        client.list_topics(timeout=8)
    errors.append(refused.value.args[0])
    deadline = time.monotonic() + 10
    while len(errors) < 2 and time.monotonic() < deadline:
        client.poll(0.5)
    return errors


def test_clients_without_the_right_credentials_or_ca_get_nothing(secured):
    clients = {
        # plaintext on the SASL_SSL port: the TLS server never answers a Kafka request
        "plaintext": {"bootstrap.servers": secured.bootstrap},
        # a wrong password, an unknown user: SASL_AUTHENTICATION_FAILED, then the connection
        # closes
        "wrong password": secured.client("alice", "not-alice-pw"),
        "unknown user": secured.client("mallory", "whatever"),
        # TLS without the fleet's CA: the client refuses the appliances' certificates
        "no CA": secured.client("alice", **{"ssl.ca.location": "probe"}),
    }
    # each refusal is a wait of its own (the listing's timeout): side by side, not in turn
    with ThreadPoolExecutor(len(clients)) as pool:
        errors = dict(zip(clients, pool.map(refusal, clients.values())))
    for what in ("wrong password", "unknown user"):
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors[what]), errors[what]
    assert errors["no CA"]


def test_zookeeper_without_klogs_digest_cannot_change_klogs_znodes(secured):
    stranger = KazooClient(hosts=secured.zookeeper + "/klog")
    stranger.start(timeout=30)
    owner = KazooClient(hosts=secured.zookeeper + "/klog", auth_data=[("digest", DIGEST)])
    owner.start(timeout=30)
    try:
        assert owner.exists("/brokers/topics/secured")
        state = "/brokers/topics/secured/partitions/0/state"
        attempts = {
            "set a partition's state": lambda: stranger.set(state, b"{}"),
            "delete a partition's state": lambda: stranger.delete(state),
            "create a topic": lambda: stranger.create("/brokers/topics/intruder", b"{}"),
            "create under the chroot": lambda: stranger.create("/intruder", b""),
            "open a znode's ACL": lambda: stranger.set_acls("/brokers/topics/secured",
                                                            OPEN_ACL_UNSAFE),
            "add a SCRAM user": lambda: stranger.create("/config/users/mallory", b"{}"),
            "read a SCRAM user": lambda: stranger.get("/config/users/alice"),
        }
        for what, attempt in attempts.items():
            with pytest.raises(NoAuthError):
                attempt()
                pytest.fail(f"a client without klog's digest could {what}")
        # klog's own identity reads the users: salted keys, never a password
        data, _ = owner.get("/config/users/alice")
        assert b"SCRAM-SHA-512" in data and PASSWORDS["alice"].encode() not in data
        assert not owner.exists("/brokers/topics/intruder")
    finally:
        stranger.stop()
        owner.stop()


def test_a_second_run_changes_a_setting_on_one_host_only_and_check_mode_agrees(secured):
    """The second run carries one host's changed setting: exactly that host's server.properties
    and its restart change (changed=2), so every other task, on every host, is idempotent (a
    run without the change repeats the same tasks and proves nothing more); only that appliance
    restarts; --check --diff then changes nothing, and no run prints a password. The plaintext
    fleet (test_cluster_playbook.py) runs the same tasks less the security ones."""
    def main_pids() -> dict[str, str]:
        return {h.name: secured.ssh(h, "systemctl show -p MainPID --value klog-appliance")
                for h in secured.fleet.hosts}

    pids = main_pids()
    text = secured.inventory.read_text()
    # a host's own klog_appliance_properties replace the fleet's: repeat them, plus one key
    own = ", ".join(f"{k}: {v}" for k, v in {**PROPERTIES, "log.retention.hours": 72}.items())
    secured.inventory.write_text(text.replace(
        "klog_appliance_broker_id: 3,",
        f"klog_appliance_broker_id: 3, klog_appliance_properties: {{{own}}},"))
    second = run_playbook(secured.inventory, secured.booted.log, *secured.booted.wheels)
    FIGURES["secured second run, one setting changed (s)"] = second.seconds
    assert second.changed == {"localhost": 0, "h1": 0, "h2": 0, "h3": 2}, second.output[-3000:]
    h3 = secured.fleet.hosts[2]
    assert "log.retention.hours=72" in secured.ssh(h3, "cat /etc/klog/server.properties")
    after = main_pids()
    assert after["h1"] == pids["h1"] and after["h2"] == pids["h2"]
    assert after["h3"] != pids["h3"], "the handler did not restart h3's appliance"
    status = json.loads(secured.ssh(h3, "/opt/klog/venv/bin/klog cluster status --config "
                                        "/etc/klog/server.properties --json"))
    assert len(status["appliances"]["3"]["nodes"]) == 1
    check = run_playbook(secured.inventory, secured.booted.log, *secured.booted.wheels,
                         "--check", "--diff")
    FIGURES["secured --check --diff run (s)"] = check.seconds
    assert check.changed == {"localhost": 0, "h1": 0, "h2": 0, "h3": 0}, check.output[-3000:]
    for secret in [*PASSWORDS.values(), DIGEST.split(":")[1]]:
        assert secret not in secured.first_run.output + second.output + check.output
