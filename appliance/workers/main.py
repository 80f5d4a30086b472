"""A worker process's entry point after the supervisor's fork; returns its exit code.

The child has reset its signal handlers to the defaults (the supervisor did that before calling
here). This installs the worker's own: SIGTERM and SIGINT stop it gracefully. It waits for the
catalog from the supervisor, opens and recovers its partitions, serves on the sockets the
supervisor bound (one per listener), beats its heartbeat in the shared-memory region, and
exits when told to stop or when the supervisor disappears (its control channel closes). Exit
codes are named in `appliance.exit_codes`: a disk that cannot be read at start, or that
refuses a topic change later, is DISK_FAILED; anything else that prevents starting is
BOOT_ERROR.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import socket
import sys

from appliance.config import BrokerConfig
from appliance.control.channel import ControlChannelError, Ready
from appliance.control.client import ControlPlaneClient
from appliance.descriptor_limits import configure_worker
from appliance.exit_codes import BOOT_ERROR, DISK_FAILED, OK
from appliance.segments.errors import StorageError
from appliance.shm.appliance_region import ApplianceRegion
from appliance.workers.worker import Worker

log = logging.getLogger(__name__)

REMOTE_READERS_SHARE = 4  # of the bound on open sealed segments (shared_state.RemoteLogs)
MIN_REMOTE_READERS = 64

HEARTBEAT_INTERVAL_S = 1.0
# The group-commit thread must get the GIL soon after its fdatasync returns, or acks=all
# answers wait for CPython's default 5 ms switch interval (measured: p99 5-6 ms at 500 req/s
# with the default; see perf/bench_broker.py).
GIL_SWITCH_INTERVAL_S = 0.0005


def worker_main(config: BrokerConfig, index: int, sock: list[socket.socket],
                control_sock: socket.socket, region_name: str) -> int:
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        region = ApplianceRegion.attach(region_name)
        control = ControlPlaneClient(control_sock, defaults=config.log_defaults,
                                      default_partitions=config.num_partitions)
        control.wait_for_catalog()
        worker = Worker(config, index=index, control=control, region=region)
    except ControlChannelError as exc:
        log.error("worker %d: the supervisor went away during start-up: %s", index, exc)
        return BOOT_ERROR
    configure_worker(config, serving=False)  # the bound on open sealed segments
    try:
        worker.open_logs()
    except (StorageError, OSError) as exc:
        log.error("worker %d: cannot open the logs on %s: %s", index, worker.log_dir, exc)
        return DISK_FAILED
    limit = configure_worker(config, serving=True)
    # readers of the other workers' partitions: a share of the same descriptor budget
    worker.remote.bound(max(limit // REMOTE_READERS_SHARE, MIN_REMOTE_READERS),
                        config.log_defaults.file_delete_delay_ms / 1000)
    return asyncio.run(_serve(worker, sock, control, region))


async def _serve(worker: Worker, sock, control: ControlPlaneClient, region) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    orphaned = False

    def pump_control():
        nonlocal orphaned
        try:
            control.pump()
        except ControlChannelError as exc:
            log.error("worker %d: %s; stopping", worker.index, exc)
            loop.remove_reader(control.sock.fileno())
            orphaned = True
            stop.set()

    worker.on_disk_failure = stop.set
    control.sock.setblocking(False)
    loop.add_reader(control.sock.fileno(), pump_control)
    control.on_kept = lambda: loop.call_soon(pump_control)
    await worker.serve(sock)
    heartbeat = asyncio.ensure_future(_beat(region, worker.index))
    region.worker_serving(worker.index)
    control.tell(Ready())
    log.info("worker %d serving %d partition(s) on port(s) %s (node %d)", worker.index,
             len(worker.partitions), ",".join(map(str, worker.bound_ports)), worker.node_id)
    await stop.wait()
    heartbeat.cancel()
    region.worker_stopping(worker.index)
    if orphaned:
        # No supervisor bounds this stop, and the log dirs' .lock is held until this process
        # exits (a new appliance waits for it): the stop gets the supervisor's bound, kept by
        # the kernel since the stop's closing and flushing are blocking calls. SIGALRM's
        # default action ends the worker as a kill -9 would; what it acknowledged is on disk
        # or in the page cache.
        bound_s = max(1, math.ceil(worker.config.shutdown_timeout_ms / 1000))
        log.warning("worker %d: stopping without a supervisor, within %d s", worker.index,
                    bound_s)
        signal.alarm(bound_s)
    await worker.stop()
    return OK if worker.disk_failure is None else DISK_FAILED


async def _beat(region, index: int) -> None:
    while True:
        region.heartbeat(index)
        await asyncio.sleep(HEARTBEAT_INTERVAL_S)
