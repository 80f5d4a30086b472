"""ElectLeaders from an admin client (KIP-460), on the controller: preferred and unclean
elections decided on a fresh read of the fleet and written as the controller writes every
partition state (fenced by its epoch, conditional on the version read).

Kafka's answers per partition (`decide`, pure):
- preferred: ELECTION_NOT_NEEDED when the preferred replica leads already;
  PREFERRED_LEADER_NOT_AVAILABLE when it is not live, shutting down or out of the ISR;
- unclean: ELECTION_NOT_NEEDED while the partition has a live leader; else the first live
  in-sync replica leads if there is one (a clean election), else the first live replica,
  alone in its ISR (what only the old ISR had is lost); ELIGIBLE_LEADERS_NOT_AVAILABLE when
  no replica is live;
- UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not exist (or is being
  deleted). A null partition list asks for every partition, and the answer then leaves out
  those where no election was needed, as Kafka's does.

Only the controller writes states: `elect` is called where `ClusterMember.election` is held,
and a state changed meanwhile is decided again on a new read (a few times).
"""

from __future__ import annotations

import logging

from cluster import znodes
from cluster.controller import Election, FencedWriter, write_states
from cluster.fleet_view import FleetSnapshot, read_fleet
from cluster.leadership import ALREADY, ELECTED, elect_preferred, nodes_of, why_not_preferred
from cluster.session import Session
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

ATTEMPTS = 3
Answer = tuple[ErrorCode, str | None]


def all_partitions(snapshot: FleetSnapshot) -> list[tuple[str, int]]:
    return sorted((name, p) for name, topic in snapshot.topics.items()
                  if name not in snapshot.deleting for p in topic.replicas)


def decide(snapshot: FleetSnapshot, name: str, partition: int, *, unclean: bool,
           controller_epoch: int) -> tuple[Answer, znodes.PartitionState | None, int]:
    """The answer for one partition, and the state to write (None: nothing) with the
    version it must still have."""
    topic = snapshot.topics.get(name)
    if topic is None or name in snapshot.deleting or partition not in topic.replicas:
        return ((ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 f"partition {name}-{partition} does not exist"), None, -1)
    if partition not in topic.states:
        return ((ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                 f"{name}-{partition} has no leader state yet"), None, -1)
    state, version = topic.states[partition]
    replicas = topic.replicas[partition]
    live = set(snapshot.brokers)
    eligible = live - nodes_of(snapshot.shutting_down, live)
    if not unclean:
        outcome, change = elect_preferred(state, replicas, eligible=eligible,
                                          controller_epoch=controller_epoch)
        if outcome == ELECTED:
            return (ErrorCode.NONE, None), change.state, version
        if outcome == ALREADY:
            return ((ErrorCode.ELECTION_NOT_NEEDED,
                     f"preferred replica {replicas[0]} leads {name}-{partition} already"),
                    None, -1)
        shutting = nodes_of(snapshot.shutting_down, live)
        return ((ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                 why_not_preferred(state, replicas, live=live, shutting=shutting)), None, -1)
    if state.leader in live:
        return ((ErrorCode.ELECTION_NOT_NEEDED,
                 f"{name}-{partition} has a live leader ({state.leader})"), None, -1)
    clean = [r for r in replicas if r in eligible and r in state.isr]
    if clean:
        leader, isr = clean[0], tuple(r for r in state.isr if r in eligible)
    else:
        anyone = [r for r in replicas if r in eligible]
        if not anyone:
            return ((ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                     f"no replica of {name}-{partition} ({list(replicas)}) is live"),
                    None, -1)
        leader, isr = anyone[0], (anyone[0],)
    return ((ErrorCode.NONE, None),
            znodes.PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch),
            version)


def elect(session: Session, election: Election, partitions: list[tuple[str, int]] | None, *,
          unclean: bool) -> tuple[dict[tuple[str, int], Answer],
                                  dict[tuple[str, int], znodes.PartitionState]]:
    """Carry out the elections: the answer per partition (with a null list: only those where
    an election was needed) and the states written. Raises ZooKeeperUnavailable, Fenced."""
    writer = FencedWriter(session, election)
    everything = partitions is None
    answers: dict[tuple[str, int], Answer] = {}
    written: dict[tuple[str, int], znodes.PartitionState] = {}
    pending = list(dict.fromkeys(partitions)) if partitions is not None else None
    for _ in range(ATTEMPTS):
        snapshot = read_fleet(session, None)
        if pending is None:
            pending = all_partitions(snapshot)
        changes = []
        for name, partition in pending:
            answer, state, version = decide(snapshot, name, partition, unclean=unclean,
                                            controller_epoch=election.epoch)
            answers[(name, partition)] = answer
            if state is not None:
                changes.append(((name, partition), state, version))
        errors = write_states(writer, [(znodes.state_path(n, p), s, v)
                                       for (n, p), s, v in changes])
        pending = []
        for (key, state, _), error in zip(changes, errors):
            if error is not None:
                pending.append(key)  # changed meanwhile: decide again on what it is now
            else:
                written[key] = state
                log.info("%s-%d: leader -> %d (epoch %d), isr %s: %s election asked by a "
                         "client", key[0], key[1], state.leader, state.leader_epoch,
                         list(state.isr), "unclean" if unclean else "preferred")
        if not pending:
            break
    for key in pending:
        answers[key] = (ErrorCode.REQUEST_TIMED_OUT, "the partition's state kept changing")
    if everything:
        answers = {k: a for k, a in answers.items()
                   if a[0] != ErrorCode.ELECTION_NOT_NEEDED}
    return answers, written
