"""What fleet tests share: starting appliances against a ZooKeeper ensemble, waiting on the
fleet's state, reading replicas from disk, and an acknowledged-writes producer.

One module so that each fault or feature test reads as its scenario, not as its plumbing."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from klog.protocol.record_batch import HEADER_BYTES, read_header
from tests.conftest import Appliance
from tests.polling import wait_until

SESSION_MS = 6000


@dataclass(frozen=True)
class FleetSpec:
    """The fleet a test module runs (its `FLEET`, started once for the module by the `fleet`
    fixture of tests/fleet/conftest.py): appliances `broker_ids`, `log_dirs` workers each,
    under `chroot`, with `settings` (and `settings_of[broker_id]` for one appliance only);
    `joining_later` are configured alike but not started (a test starts them)."""

    chroot: str
    settings: dict[str, str] = field(default_factory=dict)
    settings_of: dict[int, dict[str, str]] = field(default_factory=dict)
    broker_ids: tuple[int, ...] = (1, 2, 3)
    log_dirs: int = 2
    joining_later: tuple[int, ...] = ()
    # run on each configured appliance before it starts (e.g. `klog users add`)
    prepare: Callable[[Appliance], None] | None = None


@contextlib.contextmanager
def running_fleet(ensemble, root: Path, spec: FleetSpec) -> Iterator[list[Appliance]]:
    """The appliances of `spec`, started in order (those joining later after them, not
    started) and stopped whatever happens; yields once Metadata lists every started node."""
    appliances: list[Appliance] = []

    def configured(broker_id: int) -> Appliance:
        appliance = fleet_appliance(ensemble, root, spec.chroot, broker_id,
                                    log_dirs=spec.log_dirs,
                                    settings={**spec.settings,
                                              **spec.settings_of.get(broker_id, {})})
        if spec.prepare is not None:
            spec.prepare(appliance)
        return appliance

    try:
        for broker_id in spec.broker_ids:
            appliances.append(configured(broker_id).start(timeout_s=60))
        wait_for_brokers(appliances[0], spec.log_dirs * len(spec.broker_ids))
        appliances += [configured(broker_id) for broker_id in spec.joining_later]
        yield appliances
    finally:
        for appliance in appliances:
            appliance.stop()


def fleet_appliance(ensemble, root: Path, chroot: str, broker_id: int, *, log_dirs: int = 2,
                    settings: dict[str, str] | None = None) -> Appliance:
    """An appliance of the fleet under `chroot`, not started (e.g. one that joins later)."""
    return Appliance(root / f"a{broker_id}", log_dirs=log_dirs, settings={
        "broker.id": str(broker_id),
        "zookeeper.connect": f"{ensemble.connect}{chroot}",
        "zookeeper.session.timeout.ms": str(SESSION_MS),
        "broker.rack": f"rack-{broker_id}",
        "group.initial.rebalance.delay.ms": "0",
        **(settings or {}),
    })


def zk_client(ensemble, chroot: str):
    from kazoo.client import KazooClient
    client = KazooClient(hosts=f"{ensemble.connect}{chroot}")
    client.start(timeout=10)
    return client


def metadata(bootstrap: str):
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)


def wait_for_brokers(appliance: Appliance, count: int, timeout_s: float = 30) -> None:
    wait_until(lambda: len(metadata(appliance.bootstrap).brokers) == count, timeout_s,
               f"Metadata to list {count} brokers")


def led(bootstrap: str, topic: str, partitions: int) -> bool:
    """Whether Metadata from `bootstrap` shows every partition of `topic` with a leader."""
    found = metadata(bootstrap).topics.get(topic)
    return (found is not None and len(found.partitions) == partitions
            and all(p.leader >= 0 for p in found.partitions.values()))


def partition_state(zk, topic: str, partition: int) -> dict:
    """The partition's state znode: leader, leader_epoch, isr, controller_epoch."""
    data, _ = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return orjson.loads(data)


def controller_and_epoch(zk) -> tuple[int, int]:
    try:
        data, _ = zk.get("/controller")
    except Exception:  # noqa: BLE001 - none elected right now
        return -1, int(zk.get("/controller_epoch")[0])
    return orjson.loads(data)["brokerid"], int(zk.get("/controller_epoch")[0])


def appliance_of(fleet: list[Appliance], node_id: int) -> Appliance:
    """The appliance serving node `node_id` (broker.id × 100 + worker index)."""
    return next(a for a in fleet if a.settings["broker.id"] == str(node_id // 100))


def kill_appliance(victim: Appliance) -> None:
    """kill -9 of the supervisor, then of its workers: nothing of the appliance is left."""
    pids = [pid for pid in victim.pids().values() if pid > 0]
    victim.kill()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def replica_batches(appliance: Appliance, topic: str, partition: int) -> list[tuple] | None:
    """(base offset, last offset delta, leader epoch, crc) of every batch of this appliance's
    replica of the partition, read from its segment files; None if it holds no replica."""
    for disk in appliance.log_dirs:
        directory = Path(disk) / f"{topic}-{partition}"
        if directory.is_dir():
            batches = []
            for path in sorted(directory.glob("*.log")):
                batches += [(h.base_offset, h.last_offset_delta, h.partition_leader_epoch,
                             h.crc) for h in batch_headers(path.read_bytes())]
            return batches
    return None


def replica_bytes(appliance: Appliance, topic: str, partition: int) -> int | None:
    """The bytes of record batches in this appliance's replica of the partition (headers
    walked, not the preallocated rest of the segment); None if it holds no replica."""
    for disk in appliance.log_dirs:
        directory = Path(disk) / f"{topic}-{partition}"
        if directory.is_dir():
            total = 0
            try:
                for path in sorted(directory.glob("*.log")):
                    with open(path, "rb") as segment:
                        while len(head := segment.read(HEADER_BYTES)) == HEADER_BYTES:
                            header = read_header(head, 0)
                            if header.batch_length == 0:
                                break
                            total += header.size
                            segment.seek(header.size - HEADER_BYTES, os.SEEK_CUR)
            except FileNotFoundError:
                return None  # deleted meanwhile
            return total
    return None


def batch_headers(data: bytes):
    """The batches of a segment file, up to its preallocated zeros."""
    pos = 0
    while len(data) - pos >= HEADER_BYTES:
        header = read_header(data, pos)
        if header.batch_length == 0:
            return
        yield header
        pos += header.size


def all_replicas_equal(fleet: list[Appliance], topic: str, partitions: int) -> bool:
    """Whether every appliance holds a replica of each partition, all with the same batches
    (for a topic whose replication factor is the fleet's size)."""
    for partition in range(partitions):
        copies = [replica_batches(a, topic, partition) for a in fleet]
        if any(c is None for c in copies) or not copies[0] or any(c != copies[0] for c in copies):
            return False
    return True


def read_values(consumer, count: int, timeout_s: float) -> set[int]:
    """The integer values a subscribed or assigned consumer reads (it is closed after)."""
    values: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(values) < count and time.monotonic() < deadline:
        for message in consumer.consume(count, timeout=1):
            if not message.error():
                values.add(int(message.value()))
    consumer.close()
    return values


def read_partition(bootstrap: str, topic: str, partition: int, end: int,
                   timeout_s: float = 60) -> list[tuple[int, int]]:
    """(offset, integer value) of the partition's records from 0 up to `end`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}-{partition}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout_s
    while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=1):
            if not message.error():
                out.append((message.offset(), int(message.value())))
    consumer.close()
    return out


class AckedWriter:
    """An idempotent acks=all confluent-kafka producer in a thread writing numbered values
    round-robin over the partitions, keeping what was acknowledged and every error."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, first_value: int = 0,
                 **config):
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 2, "message.timeout.ms": 120_000,
                                  "retry.backoff.ms": 100, **config})
        self.topic = topic
        self.partitions = partitions
        self.first_value = first_value
        self.acked: dict[tuple[int, int], int] = {}  # (partition, offset) -> value
        # acknowledged without an offset: librdkafka reports a retried idempotent message
        # it knows was persisted (a later one of its sequence was acknowledged) that way
        self.acked_without_offset: list[tuple[int, int]] = []  # (partition, value)
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        elif msg.offset() is None:
            self.acked_without_offset.append((msg.partition(), int(msg.value())))
        else:
            self.acked[(msg.partition(), msg.offset())] = int(msg.value())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, str(self.first_value + self.sent).encode(),
                                      partition=self.sent % self.partitions,
                                      on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)
            if self.sent % 50 == 0:
                time.sleep(0.01)  # a steady stream, not a flood
        self.producer.flush(120)

    def start(self) -> AckedWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)
