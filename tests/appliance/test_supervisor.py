"""The appliance as a whole: a supervisor and two workers, real processes, real signals."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time

import pytest
from confluent_kafka import Producer

from appliance.config import load_config
from appliance.shm.appliance_region import region_name_for
from klog.protocol.apis import fetch, metadata
from klog.protocol.records import decode_batches
from tests.conftest import require_binary
from tests.interop.helpers import create_topic
from tests.worker.raw import RawClient
from tests.worker.test_produce_fetch_raw import fetch_request

pytestmark = pytest.mark.slow


def shm_names() -> set[str]:
    return set(os.listdir("/dev/shm"))


def region_of(appliance) -> str:
    return region_name_for(load_config(appliance.config)).lstrip("/")


def fetch_raw(port, topic, partition, offset=0):
    client = RawClient(port)
    request = fetch_request(topic, offset, 0)
    request["topics"][0].partitions[0].partition = partition
    answer = client.call(fetch, 11, **request).responses[0].partitions[0]
    client.close()
    return answer


def produce_acked(bootstrap, topic, count, prefix, duration_s=None, errors=None):
    """An acks=all idempotent producer; returns the values whose delivery was acknowledged.
    With `duration_s`, `count` messages are spread over that many seconds; `errors` (a
    Counter) counts the failed deliveries by error name."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 2,
                         "message.timeout.ms": 60000})
    acked, failed = [], []

    def report(err, msg):
        (failed if err else acked).append(msg.value())
        if err and errors is not None:
            errors[err.name()] += 1

    started = time.monotonic()
    for i in range(count):
        if duration_s is not None:
            time.sleep(max(0.0, started + duration_s * i / count - time.monotonic()))
        while True:
            try:
                producer.produce(topic, f"{prefix}-{i}".encode(), on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(90)
    return acked, failed


def read_everything(appliance, topic, partitions):
    """Every record of the topic, with CRCs verified, fetched from worker 0."""
    values = []
    for p in range(partitions):
        offset = 0
        while True:
            answer = fetch_raw(appliance.port, topic, p, offset)
            assert answer.error_code == 0
            records = bytes(answer.records or b"")
            if not records:
                break
            for header, batch in decode_batches(records, verify_crc=True):
                values.extend(r.value for r in batch if r.offset >= offset)
                offset = header.next_offset
            if offset >= answer.high_watermark:
                break
    return values


@pytest.fixture
def two_workers(appliance_factory):
    return appliance_factory(log_dirs=2, settings={"num.partitions": "4"})


def test_partitions_spread_and_a_non_owner_serves_the_same_bytes(two_workers):
    create_topic(two_workers.bootstrap, "spread", 4)
    producer = Producer({"bootstrap.servers": two_workers.bootstrap})
    for i in range(400):
        producer.produce("spread", f"v{i}".encode(), partition=i % 4)
    producer.flush(30)
    client = RawClient(two_workers.port)
    described = client.call(metadata, 8, topics=[metadata.MetadataRequestTopic(name="spread")])
    client.close()
    assert len(described.brokers) == 2
    leaders = {p.partition_index: p.leader_id for p in described.topics[0].partitions}
    assert set(leaders.values()) == {0, 1}, "partitions should be on both disks"
    for partition in range(4):
        by_worker = [fetch_raw(port, "spread", partition) for port in two_workers.ports()]
        assert by_worker[0].error_code == by_worker[1].error_code == 0
        assert bytes(by_worker[0].records) == bytes(by_worker[1].records)
        assert by_worker[0].high_watermark == by_worker[1].high_watermark == 100


def test_kill_9_of_a_worker_while_acks_all_producers_run(two_workers):
    create_topic(two_workers.bootstrap, "survive", 4)
    probe_failures = []
    stop_probe = threading.Event()

    def probe_worker_0():
        client = RawClient(two_workers.port)
        while not stop_probe.is_set():
            try:
                client.call(metadata, 8, topics=None)
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                probe_failures.append(repr(exc))
                return
            time.sleep(0.02)
        client.close()

    results = {}

    def run_producer(name):
        results[name] = produce_acked(two_workers.bootstrap, "survive", 6000, name,
                                      duration_s=4.0)

    probe = threading.Thread(target=probe_worker_0)
    producers = [threading.Thread(target=run_producer, args=(f"p{i}",)) for i in range(2)]
    probe.start()
    for thread in producers:
        thread.start()
    time.sleep(1.0)
    victim = two_workers.worker_pid(1)
    os.kill(victim, signal.SIGKILL)
    for thread in producers:
        thread.join(120)
    stop_probe.set()
    probe.join(10)

    assert probe_failures == [], "worker 0 stopped serving while worker 1 was down"
    deadline = time.monotonic() + 10
    while two_workers.pids()[1] in (0, victim) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert two_workers.pids()[1] not in (0, victim), "the supervisor did not restart worker 1"
    acked = [v for name in results for v in results[name][0]]
    assert len(acked) > 6000
    stored = read_everything(two_workers, "survive", 4)
    missing = set(acked) - set(stored)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:3]}"
    assert len(stored) == len(set(stored)), "idempotent producers must not duplicate"
    assert "worker 1 died (killed by SIGKILL)" in two_workers.log_text()


def test_sigterm_exits_0_leaves_no_shm_and_a_restart_serves_everything(two_workers):
    create_topic(two_workers.bootstrap, "kept", 4)
    acked, failed = produce_acked(two_workers.bootstrap, "kept", 2000, "k")
    assert failed == []
    region = region_of(two_workers)
    assert region in shm_names()
    assert two_workers.stop() == 0
    assert region not in shm_names()
    two_workers.start()
    assert sorted(read_everything(two_workers, "kept", 4)) == sorted(acked)


def test_kill_9_of_the_supervisor_then_a_start_reclaims_the_region(two_workers):
    create_topic(two_workers.bootstrap, "orphaned", 4)
    acked, _ = produce_acked(two_workers.bootstrap, "orphaned", 2000, "o")
    workers = list(two_workers.pids().values())
    region = region_of(two_workers)
    two_workers.kill()
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers), "workers outlived their supervisor"
    assert region in shm_names(), "a killed supervisor cannot unlink its region"
    two_workers.start()
    assert "reclaimed the shared-memory region" in two_workers.log_text()
    assert sorted(read_everything(two_workers, "orphaned", 4)) == sorted(acked)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie counts as gone: its parent (the killed supervisor) never reaped it
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_systemd_notify_ready_after_listening_and_stopping_on_sigterm(appliance_factory,
                                                                       tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(20)
    from tests.conftest import Appliance

    appliance = Appliance(tmp_path / "notified", log_dirs=2)
    received = []

    def listen():
        while True:
            try:
                message = sock.recv(4096).decode()
            except (TimeoutError, OSError):
                return
            listening = all(Appliance._accepts(p) for p in appliance.ports())
            received.append((message, listening))
            if "STOPPING=1" in message:
                return

    listener = threading.Thread(target=listen)
    listener.start()
    appliance.start(env={"NOTIFY_SOCKET": path})
    time.sleep(0.5)
    assert appliance.stop() == 0
    listener.join(20)
    sock.close()
    ready = [(m, up) for m, up in received if "READY=1" in m]
    assert ready and ready[0][1], f"READY=1 must come once every worker listens: {received}"
    assert any("STOPPING=1" in m for m, _ in received)


def test_systemd_analyze_verifies_the_unit(tmp_path):
    analyze = require_binary("systemd-analyze")
    from tests.conftest import REPO

    unit = (REPO / "systemd" / "klog-appliance.service").read_text()
    klog_binary = REPO / ".venv" / "bin" / "klog"
    assert "/opt/klog/venv/bin/klog" in unit
    local = tmp_path / "klog-appliance.service"
    local.write_text(unit.replace("/opt/klog/venv/bin/klog", str(klog_binary)))
    result = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "Type=notify" in unit and "Restart=on-failure" in unit and "LimitNOFILE" in unit


def test_klog_status_reads_the_live_appliance_without_the_network(two_workers):
    from tests.cli.test_appliance_cli import klog

    create_topic(two_workers.bootstrap, "watched", 4)
    produce_acked(two_workers.bootstrap, "watched", 400, "w")
    result = klog("status", "--config", str(two_workers.config), "--json", "--interval", "0.2")
    assert result.returncode == 0, result.stderr
    import orjson

    status = orjson.loads(result.stdout)
    assert [w["state"] for w in status["workers"]] == ["SERVING", "SERVING"]
    assert {w["port"] for w in status["workers"]} == set(two_workers.ports())
    watched = [p for p in status["partitions"] if p["topic"] == "watched"]
    assert len(watched) == 4
    assert sum(p["high_watermark"] for p in watched) == 400
    human = klog("status", "--config", str(two_workers.config), "--interval", "0")
    assert "SERVING" in human.stdout and "watched" in human.stdout
    two_workers.stop()
    stopped = klog("status", "--config", str(two_workers.config), "--interval", "0")
    assert stopped.returncode == 1 and "Traceback" not in stopped.stderr


def test_sighup_reloads_defaults_for_new_topics(appliance_factory):
    appliance = appliance_factory(log_dirs=2, settings={"num.partitions": "2"})
    text = appliance.config.read_text().replace("num.partitions=2", "num.partitions=5")
    appliance.config.write_text(text)
    appliance.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "reloaded configuration" not in appliance.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    client = RawClient(appliance.port)
    answer = client.call(metadata, 8, topics=[metadata.MetadataRequestTopic(name="after-hup")],
                         allow_auto_topic_creation=True)
    client.close()
    assert len(answer.topics[0].partitions) == 5
    assert appliance.process.poll() is None


def test_a_worker_whose_heartbeat_stops_is_killed_and_restarted(appliance_factory):
    appliance = appliance_factory(log_dirs=2, settings={"worker.heartbeat.timeout.ms": "1500"})
    stuck = appliance.worker_pid(1)
    os.kill(stuck, signal.SIGSTOP)
    deadline = time.monotonic() + 15
    while appliance.pids()[1] in (0, stuck) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert appliance.pids()[1] not in (0, stuck)
    assert "missed heartbeats" in appliance.log_text()
    deadline = time.monotonic() + 10
    while not all(appliance._accepts(p) for p in appliance.ports()):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_failed_disk_takes_only_its_worker_offline(appliance_factory):
    appliance = appliance_factory(log_dirs=2, settings={"num.partitions": "2"})
    create_topic(appliance.bootstrap, "halfway", 2)
    disk = appliance.log_dirs[1]
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs to fail a disk: {mounted.stderr.strip()}")
    try:
        # the worker may find the read-only disk first (a checkpoint's write) and stop by
        # itself, as Kafka takes a failed log dir offline: then there is nothing to kill
        with contextlib.suppress(ProcessLookupError):
            os.kill(appliance.worker_pid(1), signal.SIGKILL)
        deadline = time.monotonic() + 15
        while "stays offline" not in appliance.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "disk /" in appliance.log_text() and "stays offline" in appliance.log_text()
        client = RawClient(appliance.port)
        answer = client.call(metadata, 8, topics=[metadata.MetadataRequestTopic(name="halfway")])
        client.close()
        assert [b.node_id for b in answer.brokers] == [0]
        leaders = sorted(p.leader_id for p in answer.topics[0].partitions)
        assert leaders == [-1, 0], "the failed disk's partition has no leader; the other serves"
        assert appliance.process.poll() is None
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
