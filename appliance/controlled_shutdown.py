"""Controlled shutdown (Kafka's `controlled.shutdown.enable`): on SIGTERM in cluster mode the
supervisor first asks the fleet's controller to move leadership away from its nodes, and
stops its workers only once they lead nothing another in-sync replica could take and sit in
no ISR a live leader keeps (so acks=all stops waiting for them), or once the wait is over.

The workers serve throughout: a leader that becomes a follower answers its waiting acks=all
requests NOT_LEADER_OR_FOLLOWER, which producers retry on the new leader, so a producer
writing through a rolling restart sees no error at all. What cannot move (no other replica
in sync) keeps its leader until the appliance stops, as in Kafka.

The wait is bounded as Kafka bounds it: `controlled.shutdown.max.retries` periods of
`controlled.shutdown.retry.backoff.ms` (3 x 5 s by default); the request stays in ZooKeeper
for all of it (it is level-triggered: the controller acts on every pass), so a retry here is
a progress report, not a new request. Supervisor loop only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from appliance.config import BrokerConfig

log = logging.getLogger(__name__)


class ControlledShutdown:
    def __init__(self, fleet, config: BrokerConfig, clock: Callable[[], float] = time.monotonic):
        """`fleet`: the appliance's `FleetMembership`."""
        self.fleet = fleet
        self.clock = clock
        self.attempts = config.controlled_shutdown_max_retries
        self.backoff_s = config.controlled_shutdown_retry_backoff_ms / 1000
        self.started_at = 0.0
        self.attempt = 0

    def begin(self) -> bool:
        """Ask the controller; False when it cannot be asked (stop at once, as before)."""
        if self.attempts <= 0:
            return False
        self.started_at = self.clock()
        self.attempt = 1
        log.info("controlled shutdown: asking the fleet's controller to move leadership away "
                 "from nodes %s", sorted(self.fleet.node_ids))
        if not self.fleet.request_controlled_shutdown():
            log.warning("controlled shutdown skipped: stopping with leadership where it is")
            return False
        return True

    def poll(self) -> bool:
        """True once the workers may stop: nothing left to move, or the wait is over."""
        pending = self.fleet.shutdown_pending()
        took = self.clock() - self.started_at
        leading = self.fleet.leading()
        if not pending:
            log.info("controlled shutdown done in %.2f s: nodes %s lead %d partition(s)%s",
                     took, sorted(self.fleet.node_ids), len(leading),
                     _unmovable(leading))
            return True
        if took < self.attempt * self.backoff_s:
            return False
        if self.attempt < self.attempts:
            log.info("controlled shutdown attempt %d of %d: %d partition(s) still to move (%s)",
                     self.attempt, self.attempts, len(pending), _some(pending))
            self.attempt += 1
            return False
        log.warning("controlled shutdown incomplete after %d attempt(s) (%.1f s): %d "
                    "partition(s) could still move (%s); stopping anyway", self.attempts, took,
                    len(pending), _some(pending))
        return True


def _some(keys: list[str]) -> str:
    return ", ".join(keys[:10]) + (" ..." if len(keys) > 10 else "")


def _unmovable(leading: list[str]) -> str:
    return f" that no other in-sync replica can take ({_some(leading)})" if leading else ""
