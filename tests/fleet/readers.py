"""Consumers of the four clients (confluent-kafka, kafka-python, aiokafka, klog) that read
assigned partitions from offset 0 in a thread and keep every (offset, value) they were given,
in order, so a test can check what a failover did to them: nothing skipped, nothing read
twice, no jump back to the log start (auto.offset.reset=earliest would show as one)."""

from __future__ import annotations

import asyncio
import threading
import time


class Reader:
    """Reads `partitions` of `topic` from offset 0 until stopped, once every partition has
    reached its target end (`stop(ends)`), or on `deadline`."""

    name = "?"

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.read: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
        self.errors: list[str] = []
        self.ends: dict[int, int] | None = None
        self.deadline = float("inf")
        self._thread = threading.Thread(target=self._guarded, daemon=True, name=self.name)

    def start(self) -> Reader:
        self._thread.start()
        return self

    def stop(self, ends: dict[int, int], timeout_s: float) -> None:
        """Read on until every partition's offsets reach `ends` (or `timeout_s` passes)."""
        self.deadline = time.monotonic() + timeout_s
        self.ends = ends
        self._thread.join(timeout_s + 30)

    def done(self) -> bool:
        if time.monotonic() > self.deadline:
            return True
        ends = self.ends
        return ends is not None and all(
            (self.read[p][-1][0] + 1 if self.read[p] else 0) >= end for p, end in ends.items())

    def took(self, partition: int, offset: int, value: bytes) -> None:
        self.read[partition].append((offset, int(value)))

    def _guarded(self) -> None:
        try:
            self.run()
        except Exception as exc:  # noqa: BLE001 - the test reports it
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def run(self) -> None:
        raise NotImplementedError


class ConfluentReader(Reader):
    name = "confluent-kafka"

    def run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "failover-ck",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        try:
            while not self.done():
                for message in consumer.consume(500, timeout=0.5):
                    if message.error():  # a broker's error (not a lost connection)
                        if message.error().code() > 0:
                            self.errors.append(str(message.error()))
                        continue
                    self.took(message.partition(), message.offset(), message.value())
        finally:
            consumer.close()


class KafkaPythonReader(Reader):
    name = "kafka-python"

    def run(self) -> None:
        from kafka import KafkaConsumer, TopicPartition
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap.split(","),
                                 enable_auto_commit=False, auto_offset_reset="earliest")
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        try:
            while not self.done():
                for tp, messages in consumer.poll(timeout_ms=500).items():
                    for message in messages:
                        self.took(tp.partition, message.offset, message.value)
        finally:
            consumer.close()


class AiokafkaReader(Reader):
    name = "aiokafka"

    def run(self) -> None:
        asyncio.run(self._read())

    async def _read(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap.split(","),
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        try:
            while not self.done():
                batches = await consumer.getmany(timeout_ms=500)
                for tp, messages in batches.items():
                    for message in messages:
                        self.took(tp.partition, message.offset, message.value)
        finally:
            await consumer.stop()


class KlogReader(Reader):
    name = "klog"

    def run(self) -> None:
        import klog
        consumer = klog.Consumer(bootstrap_servers=self.bootstrap, auto_offset_reset="earliest")
        tps = [klog.TopicPartition(self.topic, p) for p in range(self.partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        try:
            while not self.done():
                for tp, records in consumer.poll(timeout_ms=500).items():
                    for record in records:
                        self.took(tp.partition, record.offset, record.value)
        finally:
            consumer.close()


READERS = (ConfluentReader, KafkaPythonReader, AiokafkaReader, KlogReader)
