"""The custom prometheus_client collector: everything is read from shm (and the supervisor's
fleet view in cluster mode) when Prometheus scrapes, so there is no state to keep in sync and
a scrape never waits on a worker.

Series of a worker are exported only from a document that worker's current incarnation
wrote; a dead worker shows as ``klog_worker_up 0`` and its counters are absent until its next
incarnation publishes (counters restart at 0 then: Prometheus' `rate` handles resets).
"""

from __future__ import annotations

import time

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from appliance.identity import NODES_PER_APPLIANCE
from appliance.shm.layout import WorkerState
from appliance.shm.metrics_area import BATCH_BUCKETS, LATENCY_BUCKETS_S
from klog.protocol.apis import API_BY_KEY

# name -> (type, help). The README's table lists the same names; tests/ops checks a scrape
# against that table both ways.
METRICS: dict[str, tuple[str, str]] = {
    "klog_worker_up": ("gauge", "1 while the worker is serving and its heartbeat is fresh"),
    "klog_worker_restarts_total": ("counter", "restarts of the worker by the supervisor"),
    "klog_worker_disk_failed": ("gauge", "1 when the worker's disk failed (it stays offline)"),
    "klog_requests_total": ("counter", "requests answered, by API and version"),
    "klog_request_errors_total": ("counter",
                                  "requests answered with a request-level error code"),
    "klog_request_latency_seconds": ("histogram", "time from reading a request to writing its "
                                     "answer, by API (and acks for Produce)"),
    "klog_connections_open": ("gauge", "client connections open now"),
    "klog_connections_opened_total": ("counter", "client connections accepted"),
    "klog_connections_closed_total": ("counter", "accepted connections closed"),
    "klog_connections_refused_total": ("counter", "connections refused over max.connections "
                                       "or max.connections.per.ip"),
    "klog_connections_idle_closed_total": ("counter", "connections closed after "
                                           "connections.max.idle.ms"),
    "klog_event_loop_lag_seconds": ("gauge", "how late the worker's event loop woke last"),
    "klog_group_commit_batch_size": ("histogram", "appends made durable by one fdatasync"),
    "klog_fdatasync_seconds": ("histogram", "duration of the group commit's fdatasyncs"),
    "klog_fdatasync_failures_total": ("counter", "fdatasyncs that failed"),
    "klog_topic_bytes_in_total": ("counter", "record bytes appended to the topic"),
    "klog_topic_messages_in_total": ("counter", "records appended to the topic"),
    "klog_topic_bytes_out_total": ("counter", "record bytes served to fetches of the topic"),
    "klog_partition_log_size_bytes": ("gauge", "size of the partition's log"),
    "klog_partition_log_start_offset": ("gauge", "first offset of the partition's log"),
    "klog_partition_high_watermark": ("gauge", "the partition's high watermark"),
    "klog_partition_log_end_offset": ("gauge", "the partition's log end offset"),
    "klog_consumer_group_members": ("gauge", "members of the consumer group"),
    "klog_consumer_group_committed_offset": ("gauge", "the group's committed offset"),
    "klog_consumer_group_lag": ("gauge", "log end offset minus the group's committed offset"),
    "klog_zookeeper_connected": ("gauge", "cluster mode: 1 while the ZooKeeper session is "
                                 "connected"),
    "klog_controller_active": ("gauge", "cluster mode: 1 when this appliance is the controller"),
    "klog_controller_epoch": ("gauge", "cluster mode: the fleet's controller epoch"),
    "klog_offline_partitions": ("gauge", "cluster mode: partitions without a live leader"),
    "klog_under_replicated_partitions": ("gauge", "cluster mode: partitions led by this "
                                         "appliance whose ISR is smaller than their replicas"),
    "klog_authentication_successes_total": ("counter", "SASL authentications that "
                                            "succeeded"),
    "klog_authentication_failures_total": ("counter", "SASL authentications that failed "
                                           "(answered after connection.failed.authentication"
                                           ".delay.ms, then closed)"),
    "klog_client_throttled_total": ("counter", "client quotas: answers a quota throttled, by "
                                    "quota type (produce, fetch, request), user and client id"),
    "klog_client_throttle_seconds_total": ("counter", "client quotas: throttle time given to "
                                           "clients over a quota (the connection muted that "
                                           "long)"),
    "klog_isr_shrinks_total": ("counter", "cluster mode: ISR shrinks the worker's leaders "
                               "asked for and got written"),
    "klog_isr_expands_total": ("counter", "cluster mode: ISR expansions the worker's leaders "
                               "asked for and got written"),
    "klog_log_cleaner_runs_total": ("counter", "log cleaner runs that swapped their cleaned "
                                    "segments in (compacted topics)"),
    "klog_log_cleaner_bytes_read_total": ("counter", "bytes the log cleaner read"),
    "klog_log_cleaner_bytes_written_total": ("counter", "bytes the log cleaner wrote (cleaned "
                                             "segments)"),
    "klog_log_cleaner_failures_total": ("counter", "log cleaner runs that ended in an error"),
    "klog_log_cleaner_uncleanable_partitions": ("gauge", "partitions the cleaner stopped "
                                                "cleaning (a corrupt batch; they keep "
                                                "serving)"),
    "klog_log_cleaner_dirty_ratio": ("gauge", "dirty bytes over cleanable bytes of a "
                                     "compacted partition, as the cleaner last saw it"),
    "klog_follower_lag_messages": ("gauge", "cluster mode: the leader's log end minus a "
                                   "follower's, as the follower's last fetch stated it"),
    "klog_fetch_sessions": ("gauge", "cluster mode: KIP-227 fetch sessions the worker keeps "
                            "for followers (Kafka's NumIncrementalFetchSessions)"),
    "klog_fetch_session_partitions": ("gauge", "cluster mode: partitions held in those "
                                      "sessions (Kafka's NumIncrementalFetchPartitionsCached)"),
}

def _help(name: str) -> str:
    return METRICS[name][1]


def _buckets(bounds, counts: list[int], count: int) -> list[tuple[str, float]]:
    """Prometheus' cumulative buckets from per-bucket counts (the last is +Inf)."""
    out, total = [], 0
    for bound, n in zip(bounds, counts):
        total += n
        out.append((repr(float(bound)), total))
    out.append(("+Inf", count))
    return out


class ApplianceCollector:
    """Reads the region (and `fleet`, in cluster mode) at every scrape."""

    def __init__(self, region, *, heartbeat_timeout_ms: int, fleet=None, clock=time.time):
        self.region = region
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.fleet = fleet
        self.clock = clock

    def describe(self):
        return []  # no registration-time collect(): the region may not hold anything yet

    def collect(self):
        now_ms = int(self.clock() * 1000)
        snapshot = self.region.snapshot()
        yield from self._workers(snapshot, now_ms)
        yield from self._partitions(snapshot)
        if self.fleet is not None:
            yield from self._fleet()

    # workers -------------------------------------------------------------------------------

    def _workers(self, snapshot, now_ms: int):
        up = GaugeMetricFamily("klog_worker_up", _help("klog_worker_up"), labels=["worker"])
        restarts = CounterMetricFamily("klog_worker_restarts", _help("klog_worker_restarts_total"),
                                       labels=["worker"])
        failed = GaugeMetricFamily("klog_worker_disk_failed", _help("klog_worker_disk_failed"),
                                   labels=["worker"])
        documents = {}
        for w in snapshot.workers:
            label = str(w.index)
            alive = (w.state == WorkerState.SERVING
                     and w.heartbeat_age_ms(now_ms) < self.heartbeat_timeout_ms)
            up.add_metric([label], 1 if alive else 0)
            restarts.add_metric([label], w.restarts)
            failed.add_metric([label], 1 if w.state == WorkerState.FAILED else 0)
            published = self.region.metrics.read(w.index)
            if published is not None and w.pid and published[0] == w.pid:
                documents[label] = published[2]
        yield from (up, restarts, failed)
        yield from self._statistics(documents)
        yield from self._cleaner(documents)
        yield from self._quotas(documents)
        yield from self._groups(documents)

    def _statistics(self, documents: dict[str, dict]):
        requests = CounterMetricFamily("klog_requests", _help("klog_requests_total"),
                                       labels=["worker", "api", "version"])
        errors = CounterMetricFamily("klog_request_errors", _help("klog_request_errors_total"),
                                     labels=["worker", "api", "version"])
        latency = HistogramMetricFamily("klog_request_latency_seconds",
                                        _help("klog_request_latency_seconds"),
                                        labels=["worker", "api", "acks"])
        connections = {key: CounterMetricFamily(f"klog_connections_{key}",
                                                _help(f"klog_connections_{key}_total"),
                                                labels=["worker"])
                       for key in ("opened", "closed", "refused", "idle_closed")}
        open_now = GaugeMetricFamily("klog_connections_open", _help("klog_connections_open"),
                                     labels=["worker"])
        loop_lag = GaugeMetricFamily("klog_event_loop_lag_seconds",
                                     _help("klog_event_loop_lag_seconds"), labels=["worker"])
        batch = HistogramMetricFamily("klog_group_commit_batch_size",
                                      _help("klog_group_commit_batch_size"), labels=["worker"])
        sync = HistogramMetricFamily("klog_fdatasync_seconds", _help("klog_fdatasync_seconds"),
                                     labels=["worker"])
        sync_failures = CounterMetricFamily("klog_fdatasync_failures",
                                            _help("klog_fdatasync_failures_total"),
                                            labels=["worker"])
        shrinks = CounterMetricFamily("klog_isr_shrinks", _help("klog_isr_shrinks_total"),
                                      labels=["worker"])
        expands = CounterMetricFamily("klog_isr_expands", _help("klog_isr_expands_total"),
                                      labels=["worker"])
        auth_ok = CounterMetricFamily("klog_authentication_successes",
                                      _help("klog_authentication_successes_total"),
                                      labels=["worker"])
        auth_failed = CounterMetricFamily("klog_authentication_failures",
                                          _help("klog_authentication_failures_total"),
                                          labels=["worker"])
        follower_lag = GaugeMetricFamily("klog_follower_lag_messages",
                                         _help("klog_follower_lag_messages"),
                                         labels=["topic", "partition", "follower"])
        sessions = GaugeMetricFamily("klog_fetch_sessions", _help("klog_fetch_sessions"),
                                     labels=["worker"])
        session_partitions = GaugeMetricFamily("klog_fetch_session_partitions",
                                               _help("klog_fetch_session_partitions"),
                                               labels=["worker"])
        names = _api_names()
        for worker, doc in documents.items():
            for api, version, n, failed in doc.get("requests", []):
                labels = [worker, names.get(api, str(api)), str(version)]
                requests.add_metric(labels, n)
                errors.add_metric(labels, failed)
            for api, acks, counts, count, total in doc.get("latency", []):
                latency.add_metric([worker, api, acks],
                                   _buckets(LATENCY_BUCKETS_S, counts, count), total)
            conns = doc.get("connections", {})
            for key, family in connections.items():
                family.add_metric([worker], conns.get(key, 0))
            open_now.add_metric([worker], conns.get("open", 0))
            loop_lag.add_metric([worker], doc.get("loop_lag_s", 0.0))
            commit = doc.get("group_commit", {})
            if "batch" in commit:
                counts, count, total = commit["batch"]
                batch.add_metric([worker], _buckets(BATCH_BUCKETS, counts, count), total)
                counts, count, total = commit["sync"]
                sync.add_metric([worker], _buckets(LATENCY_BUCKETS_S, counts, count), total)
                sync_failures.add_metric([worker], commit.get("failures", 0))
            if "isr" in doc:
                shrinks.add_metric([worker], doc["isr"][0])
                expands.add_metric([worker], doc["isr"][1])
            if "authentications" in doc:
                auth_ok.add_metric([worker], doc["authentications"][0])
                auth_failed.add_metric([worker], doc["authentications"][1])
            for topic, partition, follower, lag in doc.get("followers", []):
                follower_lag.add_metric([topic, str(partition), str(follower)], lag)
            if "fetch_sessions" in doc:
                sessions.add_metric([worker], doc["fetch_sessions"][0])
                session_partitions.add_metric([worker], doc["fetch_sessions"][1])
        yield from (requests, errors, latency, *connections.values(), open_now, loop_lag,
                    batch, sync, sync_failures, shrinks, expands, auth_ok, auth_failed,
                    follower_lag, sessions, session_partitions)

    def _quotas(self, documents: dict[str, dict]):
        """Client quotas' throttling (workers/client_quotas.py), per client."""
        labels = ["worker", "quota_type", "user", "client_id"]
        throttled = CounterMetricFamily("klog_client_throttled",
                                        _help("klog_client_throttled_total"), labels=labels)
        seconds = CounterMetricFamily("klog_client_throttle_seconds",
                                      _help("klog_client_throttle_seconds_total"),
                                      labels=labels)
        for worker, doc in documents.items():
            for kind, user, client, n, ms in doc.get("quotas", []):
                throttled.add_metric([worker, kind, user, client], n)
                seconds.add_metric([worker, kind, user, client], ms / 1000)
        yield from (throttled, seconds)

    def _cleaner(self, documents: dict[str, dict]):
        """The log cleaners' counters (workers/log_cleaner.py): one document part each."""
        families = {key: CounterMetricFamily(f"klog_log_cleaner_{key}",
                                             _help(f"klog_log_cleaner_{key}_total"),
                                             labels=["worker"])
                    for key in ("runs", "bytes_read", "bytes_written", "failures")}
        uncleanable = GaugeMetricFamily("klog_log_cleaner_uncleanable_partitions",
                                        _help("klog_log_cleaner_uncleanable_partitions"),
                                        labels=["worker"])
        dirty = GaugeMetricFamily("klog_log_cleaner_dirty_ratio",
                                  _help("klog_log_cleaner_dirty_ratio"),
                                  labels=["topic", "partition"])
        for worker, doc in documents.items():
            part = doc.get("cleaner") or {}
            for key, family in families.items():
                family.add_metric([worker], part.get(key, 0))
            uncleanable.add_metric([worker], len(part.get("uncleanable", [])))
            for topic, partition, ratio in part.get("dirty_ratios", []):
                dirty.add_metric([topic, str(partition)], ratio)
        yield from (*families.values(), uncleanable, dirty)

    def _groups(self, documents: dict[str, dict]):
        members = GaugeMetricFamily("klog_consumer_group_members",
                                    _help("klog_consumer_group_members"), labels=["group"])
        committed = GaugeMetricFamily("klog_consumer_group_committed_offset",
                                      _help("klog_consumer_group_committed_offset"),
                                      labels=["group", "topic", "partition"])
        lag = GaugeMetricFamily("klog_consumer_group_lag", _help("klog_consumer_group_lag"),
                                labels=["group", "topic", "partition"])
        newest: dict[str, tuple[int, dict]] = {}  # a group that moved: the newer report wins
        for doc in documents.values():
            report = doc.get("lag") or {}
            for group in report.get("groups", []):
                known = newest.get(group["group"])
                if known is None or known[0] < report.get("updated_ms", 0):
                    newest[group["group"]] = (report.get("updated_ms", 0), group)
        for name, (_, group) in sorted(newest.items()):
            members.add_metric([name], group["members"])
            for p in group["partitions"]:
                labels = [name, p["topic"], str(p["partition"])]
                committed.add_metric(labels, p["committed"])
                if p["lag"] is not None:
                    lag.add_metric(labels, p["lag"])
        yield from (members, committed, lag)

    # partitions and topics -----------------------------------------------------------------

    def _partitions(self, snapshot):
        gauges = {name: GaugeMetricFamily(name, _help(name), labels=["topic", "partition"])
                  for name in ("klog_partition_log_size_bytes",
                               "klog_partition_log_start_offset",
                               "klog_partition_high_watermark", "klog_partition_log_end_offset")}
        by_topic: dict[str, list[int]] = {}
        for p in snapshot.partitions:
            if p.view is None or not p.view.published:
                continue
            labels = [p.topic, str(p.partition)]
            gauges["klog_partition_log_size_bytes"].add_metric(labels, p.view.size_bytes)
            gauges["klog_partition_log_start_offset"].add_metric(labels,
                                                                 p.view.log_start_offset)
            gauges["klog_partition_high_watermark"].add_metric(labels, p.view.high_watermark)
            gauges["klog_partition_log_end_offset"].add_metric(labels, p.view.log_end_offset)
            totals = by_topic.setdefault(p.topic, [0, 0, 0])
            totals[0] += p.view.bytes_in
            totals[1] += p.view.records_in
            totals[2] += p.bytes_out
        bytes_in = CounterMetricFamily("klog_topic_bytes_in", _help("klog_topic_bytes_in_total"),
                                       labels=["topic"])
        messages_in = CounterMetricFamily("klog_topic_messages_in",
                                          _help("klog_topic_messages_in_total"), labels=["topic"])
        bytes_out = CounterMetricFamily("klog_topic_bytes_out",
                                        _help("klog_topic_bytes_out_total"), labels=["topic"])
        for topic, (nin, messages, nout) in sorted(by_topic.items()):
            bytes_in.add_metric([topic], nin)
            messages_in.add_metric([topic], messages)
            bytes_out.add_metric([topic], nout)
        yield from (*gauges.values(), bytes_in, messages_in, bytes_out)

    # the fleet (cluster mode) --------------------------------------------------------------

    def _fleet(self):
        facts = self.fleet.metrics_facts()
        facts["klog_under_replicated_partitions"] = self._under_replicated()
        for name in ("klog_zookeeper_connected", "klog_controller_active",
                     "klog_controller_epoch", "klog_offline_partitions",
                     "klog_under_replicated_partitions"):
            family = GaugeMetricFamily(name, _help(name))
            family.add_metric([], facts[name])
            yield family

    def _under_replicated(self) -> int:
        """Kafka's UnderReplicatedPartitions, per appliance: the partitions one of its nodes
        leads, as the controller's latest state says, whose ISR lacks some replica. Counted
        by the leader's appliance only, so that summing over the fleet counts each once."""
        view = self.fleet.view()
        broker_id = self.fleet.config.broker_id
        return sum(1 for topic in view.topics.values() for p in topic.leadership
                   if p.leader >= 0 and p.leader // NODES_PER_APPLIANCE == broker_id
                   and len(p.isr) < len(p.replicas))


def _api_names() -> dict[int, str]:
    return {key: spec.name for key, spec in API_BY_KEY.items()}
