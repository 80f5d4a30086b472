"""The supervisor: a pre-fork master in the style of gunicorn's arbiter.

It owns the config, the shared-memory region, the listening sockets (worker i listens on port +
i; worker 0's port is the bootstrap port), the control channels, and the topic decisions
(`LocalDecider` alone, `FleetRelay` in a fleet: topic creation and placement). It forks one
worker per `log.dirs` entry with `os.fork` rather than a process pool, because it needs the
arbiter's control over signals, inherited sockets and exit codes.

Signal handlers only queue the signal; the main loop dispatches `handle_<signal>`. Every pass
reaps dead children (`waitpid(-1, WNOHANG)` until 0), kills workers whose heartbeat went
stale, and starts what is missing once its disk's backoff has passed. Workers say why they
died through named exit codes: BOOT_ERROR halts the appliance (a bug or a bad config will
not heal by restarting), DISK_FAILED takes only that worker offline.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import signal
import socket
import time
from dataclasses import dataclass, field

from appliance import sd_notify
from appliance.config import BrokerConfig, ConfigError
from appliance.control.catalog import Catalog, cluster_id
from appliance.control.channel import Reload
from appliance.control.config_store import LocalConfigStore
from appliance.control.decisions import LocalDecider
from appliance.control.fleet import FleetRelay
from appliance.control.server import ControlServer
from appliance.controlled_shutdown import ControlledShutdown
from appliance.descriptor_limits import check_at_start as check_descriptor_limits
from appliance.exit_codes import BOOT_ERROR, DISK_FAILED, describe_exit
from appliance.fleet_membership import FleetMembership
from appliance.forking import DirectForker, ForkError, ForkServer
from appliance.identity import DiskIdentity, claim_log_dir, node_id_for
from appliance.listener_security import check_advertised_listener
from appliance.log_dir_lock import LogDirLocks, lock_log_dirs, lock_wait_s
from appliance.metrics.server import MetricsEndpoint
from appliance.scram_credentials import ScramFileStore, credentials_path
from appliance.security.acl_book import AclBook
from appliance.security.acl_file import acls_path
from appliance.security.fleet_acl_book import FleetAclBook
from appliance.shm.appliance_region import ApplianceRegion
from appliance.tls.context import check_files as check_tls_files
from appliance.workers.main import worker_main

log = logging.getLogger(__name__)

HANDLED_SIGNALS = (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                   signal.SIGQUIT)
LOOP_TICK_S = 0.5


@dataclass
class WorkerProcess:
    index: int
    pid: int = 0
    started_at: float = 0.0
    restarts: int = 0
    backoff_s: float = 0.0
    next_start_at: float = 0.0
    failed: bool = False


PRIVATE_UMASK = 0o077


@dataclass
class Supervisor:
    config: BrokerConfig
    reload_config: object = None  # () -> BrokerConfig, for SIGHUP
    workers: dict[int, WorkerProcess] = field(default_factory=dict)

    def __post_init__(self):
        self._signals: list[int] = []
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._stopping = False
        self._exit_code = 0
        self._ready_sent = False
        self._last_watchdog = 0.0
        self.sockets: list[list[socket.socket]] = []  # per worker, one per listener
        self.fleet: FleetMembership | None = None  # cluster mode only
        self._draining: ControlledShutdown | None = None  # cluster mode, after SIGTERM
        self.metrics: MetricsEndpoint | None = None  # with metrics.port only
        self._security_generation = -1  # cluster mode: the users and ACLs last broadcast
        self._configs_generation = -1  # cluster mode: the dynamic configs last broadcast
        self.log_dir_locks: LogDirLocks | None = None  # held for our life, and our workers'

    # start -------------------------------------------------------------------------------

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT (exit 0) or a boot error (exit 1)."""
        # What the appliance creates (log dirs and partition dirs 0700; segments, indexes,
        # the catalog, meta.properties, credentials 0600) is its user's only, whatever umask
        # it was started with: records and secrets are not for the host's other users. The
        # workers inherit it. Directories an operator made beforehand keep their mode.
        os.umask(PRIVATE_UMASK)
        for log_dir in self.config.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
        # before anything else touches the dirs (log_dir_lock.py): the region (reclaiming a
        # dead supervisor's), the catalog, meta.properties, the workers' recovery. A live
        # appliance with our config is refused at once: waiting for it would be pointless.
        ApplianceRegion.refuse_if_running(self.config)
        self.log_dir_locks = lock_log_dirs(
            self.config.log_dirs, wait_s=lock_wait_s(self.config.shutdown_timeout_ms))
        check_descriptor_limits(self.config.log_dirs)  # soft limit raised; warns, never stops
        self.region = ApplianceRegion.create(self.config)
        try:
            check_tls_files(self.config)  # a keystore that does not load stops start-up here
            self.sockets = [self._bind(i) for i in range(len(self.config.log_dirs))]
            if self.config.zookeeper_connect:
                decider, cluster = self._join_fleet()
            else:
                decider, cluster = self._run_alone()
            self._claim_log_dirs(cluster)
            self._serve_metrics()
            # slots first: a worker told about a new topic must find its partitions' slots
            self.region.follow(decider)
            self.control = ControlServer(decider, cluster_id=cluster,
                                         broker_id=self.config.broker_id,
                                         on_ready=self._worker_ready, acls=self._acl_book(),
                                         scram=self._scram_writer(),
                                         configs=self._config_store())
            self._install_signals()
            for index in range(len(self.config.log_dirs)):
                self.workers[index] = WorkerProcess(index)
                self._spawn(self.workers[index])
            self._loop()
        finally:
            self._shutdown()
        return self._exit_code

    def _acl_book(self) -> AclBook | None:
        """With an authorizer: the ACLs of the appliance alone, from their file; of a
        fleet, in ZooKeeper."""
        if self.config.authorizer is None:
            return None
        if self.fleet is not None:  # a fleet's ACLs live in ZooKeeper
            return FleetAclBook(self.fleet)
        try:
            return AclBook(acls_path(self.config.log_dirs[0]))
        except ValueError as exc:  # a file that does not parse: the operator must look
            raise ConfigError(str(exc)) from None

    def _scram_writer(self):
        """Where AlterUserScramCredentials writes: alone the appliance's file (workers re-read
        it by themselves), in a fleet ZooKeeper (the users are broadcast to the workers)."""
        if self.fleet is not None:
            return self.fleet
        return ScramFileStore(credentials_path(self.config.log_dirs[0]))

    def _config_store(self):
        """The dynamic config store: alone a file next to the catalog, in a fleet ZooKeeper."""
        if self.fleet is not None:
            return self.fleet.configs
        try:
            return LocalConfigStore(self.config.log_dirs[0])
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def _run_alone(self):
        catalog = Catalog(self.config.log_dirs[0])
        for problem in catalog.problems:
            log.error("catalog: %s", problem)
        # the metrics endpoint is a thread: then workers come from a fork server (forking.py)
        forker = DirectForker if self.config.metrics_port is None else ForkServer
        self.forker = forker(self._worker_child, signals=HANDLED_SIGNALS,
                             close_in_child=self._inherited_by_children)
        decider = LocalDecider(catalog, defaults=self.config.log_defaults,
                                         default_partitions=self.config.num_partitions,
                                         worker_count=len(self.config.log_dirs))
        return decider, cluster_id(self.config.log_dirs[0])

    def _join_fleet(self):
        """Cluster mode: the fork server first (kazoo starts threads), then the ZooKeeper
        session; the fleet's controller decides, this appliance follows."""
        check_advertised_listener(self.config)
        self.forker = ForkServer(self._worker_child, signals=HANDLED_SIGNALS,
                                 close_in_child=self._inherited_by_children)
        self.fleet = FleetMembership(self.config, wake=self._wake)
        self.fleet.start()
        decider = FleetRelay(
            self.fleet, broker_id=self.config.broker_id, defaults=self.config.log_defaults,
            default_partitions=self.config.num_partitions,
            default_replication_factor=self.config.default_replication_factor)
        decider.refresh()
        return decider, self.fleet.cluster_id

    def _serve_metrics(self) -> None:
        """Start the Prometheus endpoint when metrics.port is set (after the fork server)."""
        if self.config.metrics_port is None:
            return
        host, port = self.config.metrics_host, self.config.metrics_port
        endpoint = MetricsEndpoint(
            self.region, host=host, port=port,
            heartbeat_timeout_ms=self.config.worker_heartbeat_timeout_ms, fleet=self.fleet)
        try:
            endpoint.start()
        except OSError as exc:
            raise ConfigError(f"metrics.port: cannot listen on {host}:{port}: "
                              f"{exc.strerror or exc}") from None
        self.metrics = endpoint

    def _wake(self) -> None:
        """Any thread: make the loop run a pass now (kazoo's callbacks use it)."""
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b".")

    def _worker_ready(self, index: int) -> None:
        if self.fleet is not None:
            self.fleet.register_node(index)

    def _claim_log_dirs(self, cluster: str) -> None:
        """Refuse disks of another cluster or node (IdentityError), stamp new ones."""
        for index, log_dir in enumerate(self.config.log_dirs):
            claim_log_dir(log_dir, DiskIdentity(cluster, node_id_for(self.config.broker_id,
                                                                     index)))

    def _bind(self, index: int) -> list[socket.socket]:
        """Worker `index`'s sockets: one per listener, on the listener's port + index."""
        bound = []
        try:
            for listener in self.config.listeners:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                bound.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((listener.host, listener.port + index))
                sock.listen(1024)
                sock.set_inheritable(True)
        except OSError:
            for sock in bound:
                sock.close()
            raise
        return bound

    def _install_signals(self) -> None:
        for signum in HANDLED_SIGNALS:
            signal.signal(signum, self._queue_signal)

    def _queue_signal(self, signum, frame) -> None:
        self._signals.append(signum)
        self._wake()

    # the loop ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not (self._stopping and not self._alive_pids()):
            self._wait_for_events()
            while self._signals:
                self._dispatch(self._signals.pop(0))
            self._reap()
            if self.fleet is not None:
                self.control.decider.refresh()
                self._follow_fleet_security()
                self._follow_fleet_configs()
            if self._draining is not None and self._draining.poll():
                self._draining = None
                self._stop_workers()
            if self._stopping:
                if time.monotonic() > self._stop_deadline:
                    self._kill_all(signal.SIGKILL)
                continue
            self._kill_stale()
            self._start_missing()
            self._notify_systemd()

    def _follow_fleet_security(self) -> None:
        """The fleet's users or ACLs changed in ZooKeeper: tell the workers (within a pass)."""
        generation = self.fleet.security_generation
        if generation != self._security_generation:
            self._security_generation = generation
            self.control.broadcast_security()

    def _follow_fleet_configs(self) -> None:
        """The fleet's dynamic configs changed in ZooKeeper: tell the workers."""
        generation = self.fleet.configs.generation
        if generation != self._configs_generation:
            self._configs_generation = generation
            self.control.broadcast_dynamic_configs()

    def _wait_for_events(self) -> None:
        channels = self.control.by_fileno()
        timeout = LOOP_TICK_S
        pending = [w.next_start_at for w in self.workers.values() if not w.pid and not w.failed]
        if pending and not self._stopping:
            timeout = min(timeout, max(0.0, min(pending) - time.monotonic()))
        if self.fleet is not None:  # an ISR growth held back for a moment (control/fleet.py)
            due = self.control.decider.next_due()
            if due is not None:
                timeout = min(timeout, max(0.0, due - time.monotonic()))
        try:
            readable, _, _ = select.select([self._wake_r, *channels], [], [], timeout)
        except InterruptedError:
            return
        for fd in readable:
            if fd == self._wake_r:
                while True:
                    try:
                        if not os.read(self._wake_r, 4096):
                            break
                    except BlockingIOError:
                        break
            else:
                self.control.on_readable(channels[fd])

    def _dispatch(self, signum: int) -> None:
        name = signal.Signals(signum).name.lower()
        getattr(self, f"handle_{name}")()

    # signal handlers ---------------------------------------------------------------------

    def handle_sigchld(self) -> None:
        pass  # the loop reaps on every pass

    def handle_sigterm(self) -> None:
        """Graceful stop: in cluster mode leadership moves away first (a controlled
        shutdown, while the workers serve on); then workers stop accepting, answer what is
        in flight, flush, exit. A second signal during the controlled shutdown stops now."""
        if self._stopping:
            return
        if self._draining is not None:
            log.warning("stop signal during the controlled shutdown: stopping now")
            self._draining = None
            self._stop_workers()
            return
        sd_notify.notify("STOPPING=1")
        if self.fleet is not None and self.config.controlled_shutdown_enable:
            draining = ControlledShutdown(self.fleet, self.config)
            if draining.begin():
                self._draining = draining
                return
        self._stop_workers()

    def _stop_workers(self) -> None:
        log.info("stopping: asking %d worker(s) to finish", len(self._alive_pids()))
        self._stopping = True
        self._stop_deadline = time.monotonic() + self.config.shutdown_timeout_ms / 1000
        self._kill_all(signal.SIGTERM)

    handle_sigint = handle_sigterm
    handle_sigquit = handle_sigterm

    def handle_sighup(self) -> None:
        """Reload what can be reloaded: the settings workers apply to new decisions."""
        if self.reload_config is None:
            return
        try:
            new = self.reload_config()
        except ValueError as exc:
            log.error("reload refused, keeping the running config: %s", exc)
            return
        # SASL settings (mechanisms, PLAIN users) too; SCRAM users are re-read by themselves
        fixed = [k for k in ("broker_id", "listeners", "log_dirs", "listener_sasl",
                             "connection_failed_authentication_delay_ms",
                             "authorizer_class_name", "super_users",
                             "allow_everyone_if_no_acl_found")
                 if getattr(new, k) != getattr(self.config, k)]
        if fixed:
            log.warning("reload: %s change only with a restart", ", ".join(fixed))
        sd_notify.notify("RELOADING=1")
        self.control.decider.defaults = new.log_defaults
        self.control.decider.default_partitions = new.num_partitions
        self.control.broadcast(Reload(new.log_defaults, new.num_partitions,
                                      new.log_retention_check_interval_ms))
        log.info("reloaded configuration")
        sd_notify.notify("READY=1")

    # workers -----------------------------------------------------------------------------

    def _spawn(self, worker: WorkerProcess) -> None:
        self.region.worker_starting(worker.index, restarts=worker.restarts)
        try:
            pid, parent_end = self.forker.fork(worker.index)
        except ForkError as exc:
            log.critical("cannot start worker %d: %s; halting the appliance", worker.index, exc)
            self._exit_code = 1
            self.handle_sigterm()
            return
        worker.pid = pid
        worker.started_at = time.monotonic()
        self.region.worker_forked(worker.index, pid)
        self.control.attach(worker.index, parent_end)
        log.info("worker %d started (pid %d, port %d, disk %s)", worker.index, pid,
                 self.config.first_listener.port + worker.index,
                 self.config.log_dirs[worker.index])

    def _worker_child(self, index: int, child_end: socket.socket) -> int:
        """The body of a forked worker (signal handlers already reset): it keeps only its own
        listening socket, then serves until told to stop."""
        for other, sockets in enumerate(self.sockets):
            if other != index:
                for sock in sockets:
                    sock.close()
        return worker_main(self.config, index, self.sockets[index], child_end, self.region.name)

    def _inherited_by_children(self) -> list:
        """What a child must close: the supervisor's wake pipe and the workers' channels.
        Never the log dirs' locks: a worker (and the fork server that forks workers) keeps
        them, so that no new appliance starts on the dirs until it has exited."""
        control = getattr(self, "control", None)  # the fork server starts before it exists
        channels = control.channels.values() if control is not None else ()
        return [self._wake_r, self._wake_w, *(channel.sock for channel in channels)]

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = next((w for w in self.workers.values() if w.pid == pid), None)
            if worker is not None:
                self._worker_exited(worker, status)

    def _worker_exited(self, worker: WorkerProcess, status: int) -> None:
        worker.pid = 0
        self.control.detach(worker.index)
        if self.fleet is not None:
            self.fleet.unregister_node(worker.index)
        code = os.waitstatus_to_exitcode(status)
        self.region.worker_exited(worker.index, failed=code == DISK_FAILED)
        if self._stopping:
            log.info("worker %d exited: %s", worker.index, describe_exit(code))
            return
        if code == BOOT_ERROR:
            log.critical("worker %d cannot boot; halting the appliance (see its log above)",
                         worker.index)
            self._exit_code = 1
            self.handle_sigterm()
            return
        if code == DISK_FAILED:
            log.error("worker %d: its disk %s failed; it stays offline, the others serve",
                      worker.index, self.config.log_dirs[worker.index])
            worker.failed = True
            return
        ran_s = time.monotonic() - worker.started_at
        backoff = self.config.worker_restart_backoff_ms / 1000
        worker.backoff_s = backoff if ran_s > 60 or not worker.backoff_s else min(
            worker.backoff_s * 2, self.config.worker_restart_backoff_max_ms / 1000)
        worker.next_start_at = time.monotonic() + worker.backoff_s
        worker.restarts += 1
        log.error("worker %d died (%s) after %.1f s; restarting in %.2f s", worker.index,
                  describe_exit(code), ran_s, worker.backoff_s)

    def _start_missing(self) -> None:
        now = time.monotonic()
        for worker in self.workers.values():
            if not worker.pid and not worker.failed and now >= worker.next_start_at:
                self._spawn(worker)

    def _kill_stale(self) -> None:
        timeout_s = self.config.worker_heartbeat_timeout_ms / 1000
        for worker in self.workers.values():
            if worker.pid and self.region.heartbeat_age_s(worker.index) > timeout_s:
                log.error("worker %d (pid %d) missed heartbeats for %.1f s: killing it",
                          worker.index, worker.pid, timeout_s)
                self._signal(worker.pid, signal.SIGKILL)

    def _alive_pids(self) -> list[int]:
        return [w.pid for w in self.workers.values() if w.pid]

    def _kill_all(self, signum) -> None:
        for pid in self._alive_pids():
            self._signal(pid, signum)

    @staticmethod
    def _signal(pid: int, signum) -> None:
        try:
            os.kill(pid, signum)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                raise

    # systemd -----------------------------------------------------------------------------

    def _notify_systemd(self) -> None:
        live = [w for w in self.workers.values() if not w.failed]
        serving = all(w.pid and self.control.channels.get(w.index) and
                      self.control.channels[w.index].ready for w in live)
        if serving and not self._ready_sent:
            self._ready_sent = True
            sd_notify.notify(f"READY=1\nSTATUS=serving {len(live)} worker(s) on "
                             f"{','.join(map(str, self.config.listeners))}")
            log.info("appliance ready: %d worker(s) serving", len(live))
        interval = sd_notify.watchdog_interval_s()
        if interval and serving and time.monotonic() - self._last_watchdog >= interval:
            self._last_watchdog = time.monotonic()
            sd_notify.notify("WATCHDOG=1")

    def _shutdown(self) -> None:
        if self.metrics is not None:
            self.metrics.stop()
        if self.fleet is not None:
            self.fleet.stop()  # our nodes leave the fleet now, not after a session timeout
        forker = getattr(self, "forker", None)
        if forker is not None:
            forker.close()
        self._kill_all(signal.SIGKILL)
        while self._alive_pids():
            self._reap()
            time.sleep(0.01)
        for sockets in self.sockets:
            for sock in sockets:
                sock.close()
        region = getattr(self, "region", None)
        if region is not None:
            region.unlink()
        if self.log_dir_locks is not None:  # last: every worker is gone; the files stay
            self.log_dir_locks.close()
