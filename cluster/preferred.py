"""Preferred-replica elections: the controller's automatic rebalance and requested elections.

Who writes what:
- anyone (`klog cluster elect-leaders`, as Kafka's kafka-preferred-replica-election.sh did in
  ZooKeeper mode) creates `/admin/preferred_replica_election` with Kafka's JSON listing the
  partitions; an existing node means an election is still in progress, and is refused;
- the controller (`PreferredLeaders.run`, on its pass) moves each listed partition whose
  preferred replica is eligible (`leadership.elect_preferred`), each state with a fenced
  conditional set, and removes the request once every listed partition is settled (led by
  its preferred replica, or that replica cannot lead now). A state that changed meanwhile
  keeps the request for the next pass: the decision is made again on what is there.
- with `auto.leader.rebalance.enable`, every `leader.imbalance.check.interval.seconds` (the
  first check 5 s after the election, or sooner with a shorter interval, as Kafka) the
  controller applies Kafka's imbalance rule (`leadership.imbalanced`) the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from cluster import znodes
from cluster.controller import FencedWriter, write_states
from cluster.fleet_view import FleetSnapshot
from cluster.leadership import (
    ELECTED,
    LeadershipConfig,
    elect_preferred,
    imbalanced,
    nodes_of,
)
from cluster.session import BadVersionError, NodeExistsError, NoNodeError, Session

log = logging.getLogger(__name__)

FIRST_CHECK_S = 5.0  # Kafka schedules the first imbalance check 5 s after a controller starts


class ElectionInProgress(RuntimeError):
    """A preferred-replica election request is already waiting for the controller."""


def request_election(session: Session, partitions: list[tuple[str, int]]) -> None:
    """Ask the controller for a preferred-replica election of `partitions`. Raises
    ElectionInProgress, ZooKeeperUnavailable."""
    try:
        session.call("create", znodes.PREFERRED_REPLICA_ELECTION,
                     znodes.PreferredElection(tuple(partitions)).encode(), makepath=True)
    except NodeExistsError:
        raise ElectionInProgress(
            f"a preferred replica election is in progress ({znodes.PREFERRED_REPLICA_ELECTION} "
            f"exists); retry when the controller has removed it") from None


class PreferredLeaders:
    """The controller's preferred-replica elections; `run` once per pass while elected."""

    def __init__(self, config: LeadershipConfig, clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.clock = clock
        self.next_check = 0.0

    def elected(self) -> None:
        """A new term as controller: the first automatic check comes a little later."""
        self.next_check = self.clock() + min(FIRST_CHECK_S,
                                             self.config.leader_imbalance_check_interval_s)

    def run(self, writer: FencedWriter, snapshot: FleetSnapshot) -> int:
        """Carry out a requested election, and the automatic check when due; the writes."""
        writes = 0
        if snapshot.preferred_election is not None:
            writes += self._requested(writer, snapshot, *snapshot.preferred_election)
        if self.config.auto_leader_rebalance_enable and self.clock() >= self.next_check:
            self.next_check = self.clock() + self.config.leader_imbalance_check_interval_s
            writes += self._rebalance(writer, snapshot)
        return writes

    def _requested(self, writer: FencedWriter, snapshot: FleetSnapshot,
                   request: znodes.PreferredElection, version: int) -> int:
        wanted = [(t, p) for t, p in request.partitions if _has_state(snapshot, t, p)]
        writes, settled = self._elect(writer, snapshot, wanted, "requested")
        if not settled:
            return writes  # a state changed meanwhile: decide again on the next pass
        try:
            writer.write(lambda tx: tx.delete(znodes.PREFERRED_REPLICA_ELECTION,
                                              version=version))
        except (NoNodeError, BadVersionError) as exc:
            log.info("preferred replica election request changed meanwhile (%s)",
                     type(exc).__name__)
            return writes
        log.info("preferred replica election of %d partition(s) done", len(wanted))
        return writes + 1

    def _rebalance(self, writer: FencedWriter, snapshot: FleetSnapshot) -> int:
        """Kafka's auto leader rebalance: the partitions of nodes over the imbalance ratio."""
        leadership = {(name, p): (topic.replicas[p], state.leader)
                      for name, topic in snapshot.topics.items()
                      for p, (state, _) in topic.states.items()
                      if _has_state(snapshot, name, p)}
        candidates = imbalanced(leadership,
                                self.config.leader_imbalance_per_broker_percentage)
        if not candidates:
            return 0
        writes, _ = self._elect(writer, snapshot, sorted(candidates), "auto rebalance")
        return writes

    def _elect(self, writer: FencedWriter, snapshot: FleetSnapshot,
               partitions: list[tuple[str, int]], why: str) -> tuple[int, bool]:
        """Move each partition to its preferred replica where it may lead: (writes, whether
        every partition is settled, i.e. no write lost a race)."""
        live = set(snapshot.brokers)
        eligible = live - nodes_of(snapshot.shutting_down, live)
        changes = []
        for name, partition in partitions:
            topic = snapshot.topics[name]
            state, version = topic.states[partition]
            outcome, change = elect_preferred(state, topic.replicas[partition],
                                              eligible=eligible,
                                              controller_epoch=writer.election.epoch)
            if outcome == ELECTED:
                changes.append((name, partition, state, change, version))
        errors = write_states(writer, [(znodes.state_path(n, p), c.state, v)
                                       for n, p, _, c, v in changes])
        writes = 0
        for (name, partition, state, change, _), error in zip(changes, errors):
            if error is not None:
                continue
            new = change.state
            log.info("%s-%d: leader %d -> %d (epoch %d), isr %s: %s (%s)", name, partition,
                     state.leader, new.leader, new.leader_epoch, list(new.isr), change.reason,
                     why)
            writes += 1
        return writes, all(error is None for error in errors)


def _has_state(snapshot: FleetSnapshot, name: str, partition: int) -> bool:
    """Whether the partition exists with a state (a request may name anything)."""
    topic = snapshot.topics.get(name)
    return (topic is not None and name not in snapshot.deleting
            and partition in topic.states and partition in topic.replicas)
