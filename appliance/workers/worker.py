"""A worker: one event loop serving the Kafka protocol for the partitions of one disk.

The worker is advertised as its own Kafka node (node id = broker.id * 100 + worker index) and is
the only writer of the partitions it owns. It learns topics and placement from its control plane
(a `ControlPlane`: the supervisor's, over the control channel) and follows its decisions:
opening logs for new partitions it owns, deleting those of deleted topics.
Background duties run on the same loop: retention every `log.retention.check.interval.ms`,
time-based flushes, and the log cleaner of compacted topics (its CPU work in a thread).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path

from appliance.client_quotas.dynamic_store import DynamicConfigQuotaStore
from appliance.config import BrokerConfig
from appliance.control.channel import Reload
from appliance.control.interface import ControlPlane
from appliance.control.topics import FleetNode, TopicInfo
from appliance.identity import node_id_for
from appliance.listeners import Listener
from appliance.scram_credentials import (
    BroadcastCredentials,
    ScramCredentialFile,
    credentials_path,
)
from appliance.segments.descriptor_cache import CACHE as DESCRIPTORS
from appliance.segments.durable_together import durable_together
from appliance.segments.errors import StorageError
from appliance.segments.group_commit import GroupCommitter
from appliance.segments.readable import ReadableLog
from appliance.shm.appliance_region import ApplianceRegion
from appliance.shm.partition_table import FreeSlotError
from appliance.shm.seqlock import TornEntryError
from appliance.tls.context import ServerTls
from appliance.workers.authentication import Authenticator
from appliance.workers.client_quotas import QuotaEnforcer
from appliance.workers.connection import KafkaConnection
from appliance.workers.connection_limits import ConnectionGuard, is_idle, sweep_interval_s
from appliance.workers.dynamic_settings import DynamicSettings
from appliance.workers.groups.coordinator import GroupCoordinator
from appliance.workers.groups.offsets_log import OFFSETS_TOPIC
from appliance.workers.handlers import HANDLERS
from appliance.workers.handlers.api_versions import advertised_versions
from appliance.workers.log_cleaner import LogCleaner
from appliance.workers.replication.context import ReplicaContext
from appliance.workers.replication.dialing import LinkSecurity, link_security
from appliance.workers.replication.fetch_settings import ReplicaFetchSettings, pipelining_enabled
from appliance.workers.replication.manager import ReplicaManager
from appliance.workers.replication.waiters import AppendWaiters
from appliance.workers.shared_state import Publisher, RemoteLogs
from appliance.workers.statistics import MetricsPublisher, WorkerStatistics
from appliance.workers.transactions.coordinator import TransactionCoordinator
from appliance.workers.transactions.txn_log import TRANSACTION_TOPIC
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

FLUSH_CHECK_INTERVAL_S = 0.1
UNOPENED_RETRY_S = 2.0  # partitions not opened for want of descriptors: the next try
# Appends by other workers cannot wake our waiters directly; while fetches wait on their
# partitions, the published high watermarks are polled this often (a few µs per partition).
# While none does, the poll sleeps until a fetch starts to wait: a timer at this rate cost
# an idle worker about 8% of a core, and every worker of a host pays it.
REMOTE_POLL_INTERVAL_S = 0.002
REMOTE_WATCH_PAUSE_RATIO = 4  # the watch's pause after a look, at least, in looks' times


class Worker:
    """The state one worker process serves from. Everything runs on one asyncio loop."""

    def __init__(self, config: BrokerConfig, *, index: int, control: ControlPlane,
                 region: ApplianceRegion, clock=time.time):
        self.config = config
        self.index = index
        self.clock = clock
        # set when this worker's log dir failed after start (a topic change could not be
        # written): it stops and exits DISK_FAILED, and the supervisor keeps it offline, as
        # Kafka takes a failed log dir offline (`on_disk_failure`: the entry point's stop)
        self.disk_failure: BaseException | None = None
        self.on_disk_failure: Callable[[], None] = lambda: None
        self.log_dir = Path(config.log_dirs[index])
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.control = control
        self.cluster_id = control.cluster_id
        self.node_id = node_id_for(config.broker_id, index)
        self.waiters = AppendWaiters()
        self.region = region
        self.remote = RemoteLogs(region, config.log_dirs, index)
        self.statistics = WorkerStatistics(enabled=config.metrics_port is not None)
        self.committer = GroupCommitter(on_sync=self.statistics.group_commit_synced
                                        if self.statistics.enabled else None,
                                        log_dirs=[str(self.log_dir)])
        # the replicas of this disk, and in cluster mode their leader and follower roles
        self.replication = ReplicaManager(ReplicaContext(
            node_id=self.node_id, worker_index=index, log_dir=self.log_dir,
            control=control, publisher=Publisher(region, index), waiters=self.waiters,
            committer=self.committer, replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            statistics=self.statistics, clock=clock,
            link_security=self._link_security(), fetch=ReplicaFetchSettings(
                max_bytes=config.replica_fetch_max_bytes,
                response_max_bytes=config.replica_fetch_response_max_bytes,
                wait_max_ms=config.replica_fetch_wait_max_ms,
                min_bytes=config.replica_fetch_min_bytes, pipeline=pipelining_enabled())),
            config.log_defaults)
        self.partitions = self.replication.replicas
        self.groups = GroupCoordinator(self)
        # compacted topics: cleans this worker's partitions in a thread pool of its own
        self.cleaner = LogCleaner(self.partitions, self.log_dir, config, clock=clock)
        self.dynamic = DynamicSettings(self)  # the brokers' dynamic configs over `config`
        self.transactions = TransactionCoordinator(self, self._marker_security())
        self.handlers = dict(HANDLERS)
        self.advertised_api_versions = advertised_versions(set(self.handlers))
        self.connections: set[KafkaConnection] = set()
        self.guard = ConnectionGuard(max_connections=config.max_connections,
                                     max_connections_per_ip=config.max_connections_per_ip)
        self.port = config.first_listener.port + index
        # the SCRAM users (SASL logins, DescribeUserScramCredentials): alone the appliance's
        # file, re-read when it changes; in a fleet what the supervisor read in ZooKeeper
        self.scram_credentials = (
            BroadcastCredentials(lambda: control.scram_users) if config.zookeeper_connect
            else ScramCredentialFile(credentials_path(config.log_dirs[0])))
        # client quotas (AlterClientQuotas): in the dynamic config store, enforced per worker
        self.quotas = QuotaEnforcer(DynamicConfigQuotaStore(control),
                                    window_num=config.quota_window_num,
                                    window_size_s=config.quota_window_size_seconds)
        # authorizer.class.name set: ACL checks in every handler (appliance/workers/access.py)
        self.authorizer = config.authorizer
        self._servers: list[asyncio.base_events.Server] = []
        self._tasks: list[asyncio.Task] = []
        # listener name -> its TLS (TLS listeners only), each with its own ssl.* settings
        self.tls = self._server_tls(config)

    def _link_security(self) -> LinkSecurity:
        """How this worker's replica fetchers dial leaders; plaintext alone (no fleet)."""
        if self.control.fleet_nodes is None and not self.config.zookeeper_connect:
            return LinkSecurity()
        return link_security(self.config, self.cluster_id, self.node_id)

    def _marker_security(self) -> LinkSecurity:
        """How the transaction coordinator dials partition leaders with WriteTxnMarkers: the
        inter-broker listener with its TLS and SASL, alone as in a fleet (a leader with an
        authorizer asks ClusterAction of the inter-broker principal), under a client id of
        its own (it is no replica)."""
        security = link_security(self.config, self.cluster_id, self.node_id)
        if self.config.inter_broker_listener.uses_sasl and security.sasl is None:
            log.warning("the inter-broker listener %s is SASL but has no credentials: "
                        "transaction markers cannot be delivered until "
                        "sasl.mechanism.inter.broker.protocol names them",
                        security.listener)
        return dataclasses.replace(security, client_id=f"klog-txn-coordinator-{self.node_id}")

    def new_authenticator(self, listener: Listener | None = None) -> Authenticator | None:
        """A new connection's SASL state on `listener` (default: the first), or None on a
        listener without SASL."""
        settings = self.config.sasl_for((listener or self.config.first_listener).name)
        if settings is None:
            return None
        return Authenticator(settings, self.scram_credentials)

    # facts handlers need -----------------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def node_id_of(self, worker_index: int) -> int:
        return node_id_for(self.config.broker_id, worker_index)

    def is_serving(self, worker_index: int) -> bool:
        """Whether a worker of this appliance is up, as its heartbeat slot says."""
        if worker_index == self.index:
            return True
        return self.region.worker_serving_now(worker_index)

    @property
    def controller_node_id(self) -> int:
        """The fleet's controller in cluster mode; alone, worker 0 stands for the supervisor."""
        if self.control.fleet_nodes is not None:
            return self.control.fleet_controller_id
        return node_id_for(self.config.broker_id, 0)

    def _local_node(self, worker_index: int, listener: str = "") -> FleetNode:
        advertised = self.config.advertised_for(listener or self.config.first_listener.name)
        # the operator's broker.rack (None: unset), as Kafka reports it
        return FleetNode(self.node_id_of(worker_index), advertised.host,
                         advertised.port + worker_index, self.config.broker_rack)

    def nodes(self, listener: str = "") -> list[FleetNode]:
        """The nodes that serve now, at their endpoints of `listener` (the one the request
        came in on, as Kafka answers; "": the first): clients must not be sent to a dead
        one's port, nor to another listener's."""
        if self.control.fleet_nodes is not None:
            found = (node.on(listener) for node in self.control.fleet_nodes.values())
            return sorted((n for n in found if n is not None), key=lambda n: n.node_id)
        return [self._local_node(i, listener) for i in range(len(self.config.log_dirs))
                if self.is_serving(i)]

    def partition_leader(self, info: TopicInfo, index: int,
                         listener: str = "") -> FleetNode | None:
        """The live node that leads a partition, at its endpoint of `listener`, or None while
        it has none (offline, or not on that listener)."""
        if info.leadership is None:
            owner = info.owners[index]
            return self._local_node(owner, listener) if self.is_serving(owner) else None
        node = self.control.fleet_nodes.get(info.leadership[index].leader)
        return None if node is None else node.on(listener)

    def leads(self, topic: str, index: int) -> bool:
        """Whether appends to this partition belong here: its log is ours, and in cluster mode
        the controller made this node its leader."""
        if self.partitions.get(topic, index) is None:
            return False
        info = self.control.topic(topic)
        return (info is None or info.leadership is None
                or info.leadership[index].leader == self.node_id)

    def absent_partition_error(self, topic: str, index: int) -> ErrorCode:
        """Why this worker has no log for a partition: the topic or partition does not exist,
        or another node leads it (clients refresh metadata and go there)."""
        info = self.control.topic(topic)
        if info is None or not info.has_partition(index):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if self.partitions.unopened_reason(topic, index) is not None:
            return ErrorCode.KAFKA_STORAGE_ERROR  # ours, but out of descriptors: retriable
        return ErrorCode.NOT_LEADER_OR_FOLLOWER

    def note_fetched(self, topic: str, index: int, nbytes: int) -> None:
        """Count bytes this worker served from one of its own partitions (for status)."""
        partition = self.partitions.get(topic, index)
        publication = partition.publication if partition is not None else None
        if publication is not None:
            self.region.fetch_out.add_partition_out(publication.slot, publication.epoch,
                                                    self.index, nbytes, 0)

    def high_watermark_of(self, topic: str, index: int) -> int | None:
        """A partition's log end as its owner last published it (None: unknown here)."""
        partition = self.partitions.get(topic, index)
        if partition is not None:
            return partition.high_watermark
        slot = self.region.partitions.find(topic, index)
        if slot is None:
            return None
        try:
            return self.region.partitions.read_partition(slot).high_watermark
        except (TornEntryError, FreeSlotError):  # freed, or its owner died mid-update
            return None

    def readable_log(self, topic: str, index: int) -> ReadableLog | None:
        """The log a Fetch reads: this worker's own, or another worker's through shm."""
        partition = self.partitions.get(topic, index)
        if partition is not None:
            return partition
        if self.partitions.unopened_reason(topic, index) is not None:
            return None  # ours but not opened (out of descriptors): KAFKA_STORAGE_ERROR
        return self.remote.get(topic, index)

    # life cycle --------------------------------------------------------------------------

    def open_logs(self) -> None:
        """Open every owned partition (recovering it) and follow the control plane's changes."""
        now_ms = self.now_ms()
        self.partitions.remove_deleted_leftovers()
        with durable_together():  # every partition's checkpoints durable before serving
            for info in self.control.topics():
                self.partitions.open_topic(info, now_ms=now_ms)
        self.groups.follow_leadership()  # alone: loads what it owns; a fleet's wait for roles
        self.transactions.follow_leadership()
        self.control.add_listener(self._on_topic_change)
        self.control.add_reload_listener(self._on_reload)
        self.dynamic.follow()

    def _on_reload(self, reload: Reload) -> None:
        """Apply what a SIGHUP reloaded: defaults for new decisions, the retention period."""
        self.config = dataclasses.replace(
            self.config, log_defaults=reload.log_defaults, num_partitions=reload.num_partitions,
            log_retention_check_interval_ms=reload.log_retention_check_interval_ms)
        self.partitions.defaults = self.control.defaults
        self.dynamic.reloaded(dataclasses.replace(
            self.dynamic.static, log_defaults=reload.log_defaults,
            num_partitions=reload.num_partitions,
            log_retention_check_interval_ms=reload.log_retention_check_interval_ms))
        for tls in self.tls.values():
            tls.reload()  # new connections get the re-read certificate
        log.info("worker %d reloaded its settings", self.index)

    @staticmethod
    def _server_tls(config: BrokerConfig) -> dict[str, ServerTls]:
        """Each TLS listener's context, built in this process (one per worker)."""
        return {listener.name: ServerTls(config.tls_config(listener.name))
                for listener in config.listeners if listener.uses_tls}

    def _on_topic_change(self, name, info, changed: tuple[int, ...] | None = None) -> None:
        """`changed`: the partitions that changed, when only those did (the rest of the
        topic is as this worker took it last)."""
        if info is None:
            self.replication.forget_topic(name)
            self.remote.forget(name)
            self.partitions.close_topic(name, delete=True)
            if name == OFFSETS_TOPIC:
                self.groups.unload_all()
            if name == TRANSACTION_TOPIC:
                self.transactions.unload_all()
        else:
            # the checkpoints of every partition the change opens or moves, durable together
            # before the loop runs again (segments/durable_together.py)
            try:
                with durable_together():
                    self._take_topic(name, info, changed)
            except (StorageError, OSError) as exc:
                self._fail_disk(f"taking the change of topic {name!r}", exc)

    def _fail_disk(self, doing: str, exc: BaseException) -> None:
        """The log dir refused a write the worker cannot go on without (a partition's
        directory or checkpoint): what is on disk may not match what the worker would
        serve, so it stops serving and exits DISK_FAILED; the other workers go on."""
        if self.disk_failure is None:
            log.error("worker %d: log dir %s failed while %s: %s; taking this worker offline",
                      self.index, self.log_dir, doing, exc)
            self.disk_failure = exc
        self.on_disk_failure()

    def _take_topic(self, name, info, changed: tuple[int, ...] | None = None) -> None:
        self.partitions.open_topic(info, now_ms=self.now_ms(), indexes=changed)
        self.replication.apply(info, indexes=changed)
        for index in self.partitions.delete_moved(info, now_ms=self.now_ms(), indexes=changed):
            log.info("%s-%d: no longer a replica here; its log is deleted", name, index)
        self.remote.forget_moved(name, info.owners)
        if name == OFFSETS_TOPIC:  # in the same step as the roles: no truncation between
            self.groups.follow_leadership()
        if name == TRANSACTION_TOPIC:
            self.transactions.follow_leadership()

    async def serve(self, sockets=None) -> None:
        """Start accepting on `sockets` (one per listener, in the order of `listeners`, bound
        by the caller; a single socket stands for the first listener) or on the configured
        listeners (port + this worker's index). Each connection knows its listener."""
        loop = asyncio.get_running_loop()
        if isinstance(sockets, socket.socket):
            sockets = [sockets]
        for position, listener in enumerate(self.config.listeners):
            sock = sockets[position] if sockets is not None else None
            if sockets is not None and sock is None:
                continue
            tls = self.tls.get(listener.name)
            context = None if tls is None else tls.context

            def factory(listener=listener):
                return KafkaConnection(self, listener)

            if sock is None:
                server = await loop.create_server(
                    factory, listener.host, listener.port + self.index, reuse_address=True,
                    backlog=1024, ssl=context)
            else:
                server = await loop.create_server(factory, sock=sock, backlog=1024,
                                                  ssl=context)
            self._servers.append(server)
        self._tasks = [asyncio.ensure_future(self._retention_loop()),
                       asyncio.ensure_future(self._flush_loop()),
                       asyncio.ensure_future(self._close_idle_connections()),
                       asyncio.ensure_future(MetricsPublisher(self).run()),
                       asyncio.ensure_future(self.cleaner.run())]
        self.replication.start()
        self.groups.start()  # after the roles: it coordinates what it leads
        self.transactions.start()
        self._tasks.append(asyncio.ensure_future(self._watch_remote_appends()))

    @property
    def bound_port(self) -> int:
        """The first listener's port."""
        return self._servers[0].sockets[0].getsockname()[1]

    @property
    def bound_ports(self) -> list[int]:
        return [server.sockets[0].getsockname()[1] for server in self._servers]

    async def stop(self) -> None:
        """Stop accepting, answer what is in flight (briefly), flush and close the logs."""
        for server in self._servers:
            server.close()
        for task in self._tasks:
            task.cancel()
        self.groups.stop()
        self.transactions.stop()
        self.replication.stop()
        deadline = time.monotonic() + 2.0
        while (any(c.answers_pending for c in self.connections)
               and time.monotonic() < deadline):
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.close()
        self.committer.close()
        try:
            with durable_together():  # each log synced, then every clean-shutdown mark at once
                self.partitions.close()
        except OSError as exc:  # the marks stay unclean: the next start recovers the logs
            log.error("the logs' clean-shutdown marks were not written: %s", exc)
        self.remote.close()

    # background duties -------------------------------------------------------------------

    async def _retention_loop(self) -> None:
        while True:  # the interval is read each time: SIGHUP may change it
            await asyncio.sleep(self.config.log_retention_check_interval_ms / 1000)
            self.apply_retention()

    def apply_retention(self) -> None:
        now_ms = self.now_ms()
        for partition in self.partitions:
            try:
                deleted = partition.apply_retention(now_ms=now_ms)
            except StorageError as exc:
                log.error("retention of %s-%d failed: %s", *partition.key, exc)
                continue
            if deleted:
                log.info("retention deleted %d segment(s) of %s-%d", deleted, *partition.key)

    async def _watch_remote_appends(self) -> None:
        """Wake the consumers' fetches that wait on other workers' partitions when one's
        published high watermark moves, every REMOTE_POLL_INTERVAL_S while some wait.
        Why it is cheap: klog's consumer spreads its reads over an appliance's workers, so an
        idle one of 10,000 partitions had each worker watch 5,000 of the other's, and the
        looks (10 us a partition, every 2 ms) took 80 % of both workers' cores. Now there is
        no look while no worker has published anything since the last one covered the same
        partitions (the workers' publication counters, one load each); in a look, a
        partition whose slot was not written since (its log part's sequence number) is not
        read; and the pause after a look is at least REMOTE_WATCH_PAUSE_RATIO times what the
        look took, so a watch of many partitions of busy workers takes at most about a fifth
        of a core."""
        seen: dict[tuple[str, int], tuple[int, int]] = {}  # key -> (log seq, high watermark)
        arrived = self.waiters.readers_arrived
        table, workers = self.region.partitions, self.region.workers
        pause_s = REMOTE_POLL_INTERVAL_S
        looked_at = None  # the workers' publication counters when the last look began
        watched: set = set()  # what that look covered
        listed = -1  # the waiters' count of changes when `waiting` was last listed
        while True:
            await asyncio.sleep(pause_s)
            began = time.perf_counter()
            published = workers.publications()
            published = published[:self.index] + published[self.index + 1:]  # the others'
            if published == looked_at and self.waiters.readers_changes == listed:
                pause_s = REMOTE_POLL_INTERVAL_S
                continue  # nothing published, the same waits: nothing to look at
            listed = self.waiters.readers_changes
            waiting = [k for k in self.waiters.readers_waiting()
                       if self.partitions.get(*k) is None]
            if not waiting:  # nothing of another worker's is waited on: sleep until some
                arrived.clear()  # consumer's fetch waits (its own worker's or not)
                await arrived.wait()
                continue
            if published == looked_at and watched.issuperset(waiting):
                pause_s = REMOTE_POLL_INTERVAL_S
                continue  # no worker published anything since a look that covered these
            looked_at, watched = published, set(waiting)
            for key in waiting:
                slot = table.find(*key)
                if slot is None:
                    continue
                seq = table.log_seq(slot)
                before = seen.get(key)
                if before is not None and before[0] == seq:
                    continue  # not written since the last look
                remote = self.remote.get(*key)
                if remote is None:
                    continue
                seen[key] = (seq, remote.high_watermark)
                if before is None or before[1] != remote.high_watermark:
                    self.waiters.notify(*key)
            if len(seen) > 4 * len(waiting) + 64:
                seen = {k: v for k, v in seen.items() if k in waiting}
            pause_s = max(REMOTE_POLL_INTERVAL_S,
                          REMOTE_WATCH_PAUSE_RATIO * (time.perf_counter() - began))

    async def _close_idle_connections(self) -> None:
        """Close connections idle for `connections.max.idle.ms`, half-sent requests included."""
        max_idle_s = self.config.connections_max_idle_ms / 1000
        while True:
            await asyncio.sleep(sweep_interval_s(self.config.connections_max_idle_ms))
            now_s = time.monotonic()
            idle = [c for c in self.connections
                    if is_idle(in_flight=c.answers_pending, last_received_s=c.last_received_s,
                               now_s=now_s, max_idle_s=max_idle_s)]
            for connection in idle:
                log.debug("closing %s: idle for %.0f ms", connection.peer,
                          (now_s - connection.last_received_s) * 1000)
                connection.close()
            self.guard.stats.idle_closed += len(idle)

    def retry_unopened(self) -> None:
        """Open again the partitions that found no descriptor (replicas.py), as if their
        topics had just changed: the rest of a topic change is idempotent."""
        for name in self.partitions.unopened_topics():
            info = self.control.topic(name)
            if info is not None:
                self._on_topic_change(name, info)

    async def _flush_loop(self) -> None:
        next_retry = 0.0
        while True:
            await asyncio.sleep(FLUSH_CHECK_INTERVAL_S)
            now_ms = self.now_ms()
            DESCRIPTORS.close_due()  # evicted segments' descriptors whose grace is over
            self.remote.close_due()  # readers of other workers' partitions, retired
            if self.partitions.unopened and time.monotonic() >= next_retry:
                next_retry = time.monotonic() + UNOPENED_RETRY_S
                self.retry_unopened()
            self.partitions.remove_retired(now_ms=now_ms)  # logs moved away, delay over
            for partition in self.partitions.flushing():  # none at Kafka's defaults
                try:
                    partition.log.flush_if_due(now_ms=now_ms)
                except StorageError as exc:
                    log.error("flush of %s-%d failed: %s", *partition.key, exc)
