"""The blocking consumer's heartbeat thread: the group session survives slow processing.

The blocking `Consumer` drives the network only inside its own calls. An application that
works on a batch of records for longer than ``session_timeout_ms`` (45 s) would therefore be
dropped from its group although it is alive, which Kafka's design avoids with a background
heartbeat (``max_poll_interval_ms``, 5 minutes by default, bounds processing instead). This
thread is that heartbeat, and nothing more:

- it never touches the consumer's state machine, network or positions: the consumer publishes
  a snapshot of its membership after each network pass (:meth:`HeartbeatThread.publish`) and
  collects the thread's findings at the next one (:meth:`HeartbeatThread.take_reports`);
- it has its own connection to the coordinator, and sends a Heartbeat only when the consumer
  itself has not sent one for ``heartbeat_interval_ms`` (that is, while the application
  works);
- when the application has not polled for ``max_poll_interval_ms`` it leaves the group
  (LeaveGroup; a static member just stops heartbeating) so the partitions move on, and says
  so; the consumer then rejoins at its next poll, as Java's does.

Every error code it meets is reported with the membership it was about; the consumer's state
machine decides what it means (`Membership.on_background_heartbeat`).
"""

from __future__ import annotations

import contextlib
import threading
import time

from klog.errors import KlogError
from klog.protocol.apis import heartbeat, leave_group
from klog.security import ClientSecurity
from klog.wire import BrokerConnection

POLL_TIMEOUT = "poll-timeout"


def _now_ms() -> int:
    return int(time.time() * 1000)


class HeartbeatThread:
    def __init__(self, *, client_id: str, heartbeat_interval_ms: int, max_poll_interval_ms: int,
                 request_timeout_ms: int, ssl_context=None,
                 security: ClientSecurity | None = None):
        self._client_id = client_id
        self._ssl_context = ssl_context  # the consumer's: TLS to the coordinator too
        self._security = security  # and SASL
        self._interval_ms = heartbeat_interval_ms
        self._max_poll_ms = max_poll_interval_ms
        self._timeout_s = request_timeout_ms / 1000
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._target = None  # (address, group, generation, member id, instance id) or None
        self._last_poll_ms = 0
        self._last_heartbeat_ms = 0
        self._reports: list[tuple[object, int, str]] = []
        self._conn: BrokerConnection | None = None
        self._thread = threading.Thread(target=self._run, name="klog-heartbeat", daemon=True)
        self._thread.start()

    # the consumer's side (its own thread) -------------------------------------------------

    def publish(self, target, last_poll_ms: int, last_heartbeat_ms: int) -> None:
        with self._lock:
            self._target = target
            self._last_poll_ms = last_poll_ms
            self._last_heartbeat_ms = max(self._last_heartbeat_ms, last_heartbeat_ms)

    def take_reports(self) -> list[tuple[object, int, str]]:
        """``(error code or POLL_TIMEOUT, generation, member id)`` found since the last call."""
        with self._lock:
            reports, self._reports = self._reports, []
        return reports

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._timeout_s + 1)

    # the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        tick_s = max(0.05, min(self._interval_ms / 4000, 1.0))
        while not self._stop.wait(tick_s):
            with self._lock:
                target, last_poll, last_beat = (self._target, self._last_poll_ms,
                                                self._last_heartbeat_ms)
            now = _now_ms()
            if target is None:
                continue
            if now - last_poll > self._max_poll_ms:
                self._leave(target)
                continue
            if now - last_beat >= self._interval_ms:
                self._beat(target, now)
        self._disconnect()

    def _beat(self, target, now_ms: int) -> None:
        address, group_id, generation, member_id, instance_id = target
        answer = self._call(address, heartbeat, group_id=group_id, generation_id=generation,
                            member_id=member_id, group_instance_id=instance_id)
        with self._lock:
            self._last_heartbeat_ms = now_ms
            if answer is not None and answer.error_code != 0:
                self._reports.append((answer.error_code, generation, member_id))
                self._target = None  # the consumer decides what comes next

    def _leave(self, target) -> None:
        address, group_id, generation, member_id, instance_id = target
        if instance_id is None:
            self._call(address, leave_group, group_id=group_id, member_id=member_id,
                       members=[leave_group.MemberIdentity(member_id=member_id)])
        with self._lock:
            self._reports.append((POLL_TIMEOUT, generation, member_id))
            self._target = None

    def _call(self, address, module, **fields):
        try:
            if self._conn is None or self._conn.closed or self._conn.address != (
                    f"{address[0]}:{address[1]}"):
                self._disconnect()
                self._conn = BrokerConnection(*address, client_id=self._client_id,
                                              timeout_s=self._timeout_s,
                                              ssl_context=self._ssl_context,
                                              security=self._security)
            return self._conn.call(module, **fields)
        except KlogError:
            self._disconnect()  # the consumer's own requests will find out what is wrong
            return None

    def _disconnect(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
