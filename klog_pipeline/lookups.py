"""The driver's questions to the appliance: which partitions to read and where their logs
start and end, or where a timestamp falls (ListOffsets). One `klog.Consumer` answers them all
in ``assign`` mode, without a consumer group; `klog.Admin` lists topics for a pattern.

Runs where Spark plans (the driver's Python workers), never on executors.
"""

from __future__ import annotations

from klog import Admin, Consumer, TopicPartition
from klog.errors import KlogError
from klog_pipeline.options import SourceOptions, Subscription

TP = tuple[str, int]
LOOKUP_TIMEOUT_MS = 30_000


class LogLookups:
    def __init__(self, bootstrap_servers: str, consumer_options: dict | None = None,
                 security_options: dict | None = None):
        """``security_options``: klog's client's (SourceOptions.security_options), for the
        Admin; the consumer has them in ``consumer_options``."""
        self.bootstrap_servers = bootstrap_servers
        self._security = dict(security_options or {})
        settings = {"client_id": "klog-spark", **(consumer_options or {})}
        self._consumer = Consumer(bootstrap_servers=bootstrap_servers, **settings)
        self.read_committed = self._consumer.config.isolation_level == "read_committed"

    @classmethod
    def for_options(cls, options: SourceOptions) -> LogLookups:
        return cls(options.bootstrap_servers, options.consumer_options(),
                   options.security_options())

    def __enter__(self) -> LogLookups:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    def partitions(self, subscription: Subscription) -> list[TP]:
        """Every partition the subscription covers, sorted. Raises ValueError for a topic
        the appliance does not have (or an assigned partition it lacks)."""
        if subscription.kind == "assign":
            for topic in {t for t, _ in subscription.assigned}:
                known = self.topic_partitions(topic)
                absent = [p for t, p in subscription.assigned if t == topic and p not in known]
                if absent:
                    raise ValueError(f"topic {topic!r} has no partition {absent}")
            return list(subscription.assigned)
        if subscription.kind == "pattern":
            with Admin(self.bootstrap_servers, **self._security) as admin:
                topics = [t for t in admin.list_topics()
                          if not t.startswith("__") and subscription.matches(t)]
        else:
            topics = list(subscription.topics)
        return sorted((t, p) for t in topics for p in self.topic_partitions(t))

    def timestamp_type(self, topic: str) -> str:
        """The topic's ``message.timestamp.type`` (CreateTime or LogAppendTime), "unknown"
        if the broker does not say."""
        try:
            with Admin(self.bootstrap_servers, **self._security) as admin:
                return admin.topic_configs(topic).get("message.timestamp.type") or "unknown"
        except KlogError:
            return "unknown"

    def topic_partitions(self, topic: str) -> set[int]:
        try:
            return self._consumer.partitions_for_topic(topic, timeout_ms=LOOKUP_TIMEOUT_MS)
        except KlogError as exc:
            raise ValueError(f"topic {topic!r}: {exc}") from exc

    def earliest(self, tps: list[TP]) -> dict[TP, int]:
        """The log start offset of each partition."""
        found = self._consumer.beginning_offsets(_tps(tps), timeout_ms=LOOKUP_TIMEOUT_MS)
        return {(tp.topic, tp.partition): offset for tp, offset in found.items()}

    def latest(self, tps: list[TP]) -> dict[TP, int]:
        """The end of what this source may read of each partition: the high watermark, or
        with ``kafka.isolation.level=read_committed`` the last stable offset."""
        found = self._consumer.end_offsets(_tps(tps), timeout_ms=LOOKUP_TIMEOUT_MS)
        return {(tp.topic, tp.partition): offset for tp, offset in found.items()}

    def high_watermarks(self, tps: list[TP]) -> dict[TP, int]:
        """The high watermark of each partition, whatever the isolation level (above the last
        stable offset while a transaction is open)."""
        found: dict[TP, int] = {}
        with Admin(self.bootstrap_servers, **self._security) as admin:
            for topic in sorted({t for t, _ in tps}):
                ends = admin.list_offsets(topic)
                found.update({(topic, p): ends[p] for t, p in tps if t == topic})
        return found

    def for_times(self, timestamps: dict[TP, int]) -> dict[TP, int | None]:
        """The first offset at or after each timestamp (ms); None where no record is."""
        found = self.for_times_with_stamps(timestamps)
        return {tp: None if hit is None else hit[0] for tp, hit in found.items()}

    def for_times_with_stamps(self, timestamps: dict[TP, int]
                              ) -> dict[TP, tuple[int, int] | None]:
        """Like `for_times`, with the found record's timestamp: (offset, timestamp_ms)."""
        if not timestamps:
            return {}
        wanted = {TopicPartition(*tp): ts for tp, ts in timestamps.items()}
        found = self._consumer.offsets_for_times(wanted, timeout_ms=LOOKUP_TIMEOUT_MS)
        return {(tp.topic, tp.partition): None if hit is None else (hit.offset, hit.timestamp)
                for tp, hit in found.items()}


def _tps(tps: list[TP]) -> list[TopicPartition]:
    return [TopicPartition(*tp) for tp in tps]
