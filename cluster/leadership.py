"""Who leads a partition, and when leadership moves: pure decisions over plain data, as
Kafka's controller makes them (ZooKeeper mode).

- **Settling** (`settle`), every controller pass, for every partition:
  a leader that is not live is replaced by the first replica, in assignment order, that is
  in the ISR, live and not shutting down (leader epoch + 1; the ISR keeps only such
  replicas). If there is none, the partition goes offline (leader -1, the ISR kept, so its
  last members are the only ones that can lead it back), unless unclean election is enabled
  for the topic: then the first live replica leads, alone in its ISR, and whatever only the
  old ISR had is lost. A live leader on an appliance that shuts down (controlled shutdown)
  hands over the same way to an eligible ISR member, when there is one; otherwise it keeps
  leading until it goes. Dead replicas, and replicas shutting down, leave the ISR of a
  partition whose leader lives (same leader epoch), so acks=all stops waiting for them.
- **Preferred leaders** (`elect_preferred`, `imbalanced`): the first replica of the
  assignment is the preferred leader; it gets leadership back when it is live, in the ISR
  and not shutting down (leader epoch + 1, the ISR unchanged). The automatic rebalance
  (`auto.leader.rebalance.enable`) acts per node by Kafka's rule: when more than
  `leader.imbalance.per.broker.percentage` of the partitions a node is preferred for are led
  by another, those partitions move back.
- **Controlled shutdown, from the leaving side** (`shutdown_pending`): what the controller
  still has to change before the appliance's nodes lead nothing that could move and sit in
  no ISR a live leader keeps; the appliance waits for it to be empty.

Nodes of an appliance asking for a controlled shutdown are never chosen as leaders.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cluster.placement import NODES_PER_APPLIANCE
from cluster.znodes import PartitionState

UNCLEAN_KEY = "unclean.leader.election.enable"

# why a partition's state changed: said in the controller's log
LEADER_GONE = "leader gone"
OFFLINE = "no live in-sync replica"
UNCLEAN = "UNCLEAN leader election"
CONTROLLED_SHUTDOWN = "controlled shutdown"
ISR_SHRINK = "replicas gone or shutting down left the ISR"
PREFERRED = "preferred replica"

# outcomes of a preferred-replica election, per partition
ELECTED, ALREADY, NOT_AVAILABLE = "elected", "already", "not available"


@dataclass(frozen=True)
class LeadershipConfig:
    """The controller's leadership settings: Kafka's broker keys and defaults."""

    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10


@dataclass(frozen=True)
class Change:
    state: PartitionState
    reason: str


def nodes_of(appliances: Iterable[int], nodes: Iterable[int]) -> set[int]:
    """The node ids among `nodes` that belong to the appliances (broker ids) given."""
    wanted = set(appliances)
    return {n for n in nodes if n // NODES_PER_APPLIANCE in wanted}


def unclean_enabled(topic_config: Mapping[str, str], default: bool) -> bool:
    """The topic's `unclean.leader.election.enable` override, else the broker default. A value
    that is neither true nor false (validated at creation, so only a hand-edited znode) is
    taken as the default."""
    value = topic_config.get(UNCLEAN_KEY, "").strip().lower()
    return value == "true" if value in ("true", "false") else default


def _first(replicas: Iterable[int], *within: set[int] | tuple[int, ...]) -> int:
    return next((r for r in replicas if all(r in s for s in within)), -1)


def settle(state: PartitionState, replicas: tuple[int, ...], *, live: set[int],
           shutting: set[int], unclean: bool, controller_epoch: int) -> Change | None:
    """The partition's next state as the fleet now is, or None to leave it. `live`: the
    registered nodes; `shutting`: the nodes of appliances in a controlled shutdown."""
    eligible = live - shutting
    in_sync = tuple(r for r in state.isr if r in eligible)
    if state.leader not in live:
        leader = _first(replicas, set(state.isr), eligible)
        if leader >= 0:
            return Change(PartitionState(leader, state.leader_epoch + 1, in_sync,
                                         controller_epoch), LEADER_GONE)
        leader = _first(replicas, eligible) if unclean else -1
        if leader >= 0:
            return Change(PartitionState(leader, state.leader_epoch + 1, (leader,),
                                         controller_epoch), UNCLEAN)
        if state.leader == -1:
            return None
        return Change(PartitionState(-1, state.leader_epoch + 1, state.isr, controller_epoch),
                      OFFLINE)
    if state.leader in shutting:
        leader = _first(replicas, set(state.isr), eligible)
        if leader >= 0:
            return Change(PartitionState(leader, state.leader_epoch + 1, in_sync,
                                         controller_epoch), CONTROLLED_SHUTDOWN)
    isr = tuple(r for r in state.isr if r == state.leader or r in eligible)
    if isr != state.isr:
        return Change(PartitionState(state.leader, state.leader_epoch, isr, controller_epoch),
                      ISR_SHRINK)
    return None


def elect_preferred(state: PartitionState, replicas: tuple[int, ...], *, eligible: set[int],
                    controller_epoch: int) -> tuple[str, Change | None]:
    """(ALREADY, None), (NOT_AVAILABLE, None), or (ELECTED, the change) moving leadership to
    the preferred replica: live, not shutting down and in the ISR."""
    preferred = replicas[0]
    if state.leader == preferred:
        return ALREADY, None
    if preferred not in eligible or preferred not in state.isr:
        return NOT_AVAILABLE, None
    return ELECTED, Change(PartitionState(preferred, state.leader_epoch + 1, state.isr,
                                          controller_epoch), PREFERRED)


def why_not_preferred(state: PartitionState, replicas: tuple[int, ...], *, live: set[int],
                      shutting: set[int]) -> str:
    """Why the preferred replica cannot lead now, in words for an operator."""
    preferred = replicas[0]
    if preferred not in live:
        return f"preferred replica {preferred} is not live"
    if preferred in shutting:
        return f"preferred replica {preferred} is shutting down"
    if preferred not in state.isr:
        return f"preferred replica {preferred} is not in the ISR {list(state.isr)}"
    return f"partition led by {state.leader}"


def imbalanced(partitions: Mapping[object, tuple[tuple[int, ...], int]],
               percentage: int) -> list:
    """Kafka's auto-rebalance rule. `partitions`: key -> (replicas, current leader). For each
    node, the partitions it is the preferred replica of; if more than `percentage` % of those
    are led by another node, those are returned (each still to be checked for eligibility).
    """
    by_node: dict[int, list] = {}
    for key, (replicas, _) in partitions.items():
        if replicas:
            by_node.setdefault(replicas[0], []).append(key)
    out = []
    for node, keys in sorted(by_node.items()):
        elsewhere = [k for k in keys if partitions[k][1] != node]
        if len(elsewhere) * 100 > percentage * len(keys):
            out += elsewhere
    return out


def shutdown_pending(partitions: Iterable[tuple[object, PartitionState, tuple[int, ...]]], *,
                     ours: set[int], live: set[int], shutting: set[int]) -> list:
    """The keys of partitions the controller still has to change for a controlled shutdown of
    the nodes `ours`: one of them leads it and an eligible ISR member could take over, or one
    of them is in the ISR that a live leader elsewhere keeps. Empty: nothing could still
    move; what they lead then has no other in-sync replica to go to."""
    shutting = shutting | ours
    pending = []
    for key, state, replicas in partitions:
        change = settle(state, replicas, live=live, shutting=shutting, unclean=False,
                        controller_epoch=0)
        if change is None:
            continue
        moves = state.leader in ours and change.state.leader not in ours
        leaves = bool(ours & set(state.isr) - set(change.state.isr))
        if moves or leaves:
            pending.append(key)
    return pending
