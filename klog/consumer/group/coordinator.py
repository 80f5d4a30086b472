"""Which broker coordinates our group: FindCoordinator (key_type 0) and when to ask again. Pure.

Every group request (JoinGroup ... OffsetFetch) goes to the coordinator. It is found by asking
any broker; it is forgotten, and found again, when a group answer says NOT_COORDINATOR or
COORDINATOR_NOT_AVAILABLE or when a request to it is lost (Java's markCoordinatorUnknown).
Retriable FindCoordinator errors are retried after ``retry_backoff_ms``; others (an
unauthorized or invalid group) are the application's to see.
"""

from __future__ import annotations

import logging

from klog.errors import KlogError, error_for
from klog.outgoing import Outgoing
from klog.protocol.apis import find_coordinator
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

GROUP_KEY_TYPE = 0

#: Group answers that mean "find the coordinator again".
MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})


class CoordinatorLink:
    def __init__(self, group_id: str, retry_backoff_ms: int):
        self.group_id = group_id
        self.retry_backoff_ms = retry_backoff_ms
        self.node: int | None = None
        self.address: tuple[str, int] | None = None
        self.last_error: str | None = None
        self._in_flight = False
        self._retry_at_ms = 0

    @property
    def known(self) -> bool:
        return self.node is not None

    def request(self, now_ms: int) -> Outgoing | None:
        """FindCoordinator when the coordinator is unknown and none is under way."""
        if self.known or self._in_flight or now_ms < self._retry_at_ms:
            return None
        self._in_flight = True
        body = find_coordinator.Request(key=self.group_id, key_type=GROUP_KEY_TYPE)
        return Outgoing(None, find_coordinator, body)

    def next_poll_ms(self) -> int | None:
        return None if self.known or self._in_flight else self._retry_at_ms

    def on_response(self, response, now_ms: int) -> KlogError | None:
        """Take the answer; returns an error for the application when it is not retriable."""
        self._in_flight = False
        code = ErrorCode(response.error_code)
        if code == ErrorCode.NONE:
            self.node, self.address = response.node_id, (response.host, response.port)
            log.info("group %r: coordinator is node %d at %s:%d", self.group_id, self.node,
                     *self.address)
            self.last_error = None
            return None
        self.last_error = f"FindCoordinator: {code.name}"
        self._retry_at_ms = now_ms + self.retry_backoff_ms
        if code.retriable:
            return None
        return error_for(code, response.error_message or None)

    def on_failure(self, now_ms: int, reason: str) -> None:
        self._in_flight = False
        self.last_error = f"FindCoordinator: {reason}"
        self._retry_at_ms = now_ms + self.retry_backoff_ms

    def lost(self, now_ms: int, reason: str) -> None:
        """The coordinator moved or cannot be reached: find it again (after a backoff)."""
        if self.node is not None:
            log.info("group %r: lost coordinator node %d: %s", self.group_id, self.node,
                     reason)
            self.node = self.address = None
            self.last_error = reason
            self._retry_at_ms = now_ms + self.retry_backoff_ms
