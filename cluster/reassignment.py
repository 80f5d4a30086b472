"""Partition reassignment, the controller's side: Kafka's ZooKeeper-mode state machine, with its
progress recorded in the topic's assignment as KIP-455 records it.

**The request.** `klog cluster reassign --execute` writes `/admin/reassign_partitions` (the
target replicas of each partition to move). The controller takes it up in one fenced multi
(several, the last deleting the request, when the named topics' assignments are large):
each listed partition's replicas become the target followed by the original replicas not in
it, with `adding_replicas` (target − original) and `removing_replicas` (original − target)
in the topic's znode, and the request node is deleted. From then on the topic znode alone
says what is in flight, so a controller elected midway continues from it. A new target for a
partition already moving replaces the old one (the original replicas are its assignment less
what was being added): `--cancel` is that, with the original replicas as the target. A
partition the controller cannot move (topic gone or being deleted, no such partition, an
empty or duplicated replica list, a node that is not live, two replicas on one appliance) is
left out with an error in the log; the command checks the same before writing.

**Progress**, level-triggered on every pass (`advance`): adding replicas are replicas like
any other — their workers open the log and follow the leader, and the leader adds them to the
ISR once they have caught up. When every target replica is in the ISR, one fenced multi ends
the move (`finish_move`): the partition's state — its leader stays if it is a live target
replica, else the first target replica that is live and in the ISR leads in leader_epoch + 1
(never one out of the ISR); the removed replicas leave the ISR — and the assignment (the
target; nothing adding or removing), both conditional on the versions read, so a state
changed meanwhile (a leader's ISR write, an election) is decided again on the next pass. The
workers of removed replicas stop following and delete their logs when they see the
assignment without them (Kafka's StopReplica with delete). A cancelled or changed move drops
the replicas it was adding at once; if one of them is in the ISR it leaves it, and if one
leads (elected there in a failover) the first replica live and in the ISR takes over, in
leader_epoch + 1 (`prune_state`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cluster import state_changes, znodes
from cluster.fleet_view import FleetSnapshot, TopicState
from cluster.placement import appliance_of, elect_leader
from cluster.session import BadVersionError, NodeExistsError, NoNodeError

log = logging.getLogger(__name__)

# The topics' assignments one multi takes up of a request: half of ZooKeeper's default
# jute.maxbuffer (1 MB), the rest left to the multi's framing and paths.
ACCEPT_BYTES = 512 * 1024


@dataclass(frozen=True)
class Move:
    """A partition's assignment while it moves: `replicas` = target + original (distinct)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def moving(self) -> bool:
        return bool(self.adding or self.removing)


def refusal(topic: TopicState | None, partition: int, replicas: tuple[int, ...],
            live: set[int], *, deleting: bool = False) -> str | None:
    """Why `replicas` cannot become the target of `topic`-`partition` (None: it can): the
    rules the controller applies to a request, and the command before writing one."""
    name = f"{topic.name}-{partition}" if topic is not None else f"partition {partition}"
    if topic is None or deleting:
        return f"{name}: the topic does not exist" + (" (it is being deleted)" if deleting
                                                     else "")
    if partition not in topic.replicas:
        return (f"{name}: no such partition (the topic has partitions 0-"
                f"{len(topic.replicas) - 1})")
    if not replicas:
        return f"{name}: the replica list is empty"
    if len(set(replicas)) != len(replicas):
        twice = sorted({r for r in replicas if replicas.count(r) > 1})
        return f"{name}: node(s) {twice} listed more than once"
    current = Move(topic.replicas[partition], topic.adding.get(partition, ()),
                   topic.removing.get(partition, ())).original
    unknown = [r for r in replicas if r not in live and r not in current]
    if unknown:  # (a replica that stays where it is may be down meanwhile)
        return f"{name}: node(s) {unknown} are not live nodes of the fleet"
    appliances = [appliance_of(r) for r in replicas]
    shared = sorted({a for a in appliances if appliances.count(a) > 1})
    if shared:
        return (f"{name}: two replicas on appliance(s) {shared}; an appliance is one failure "
                f"domain and holds one replica of a partition")
    for node in replicas:
        held = [r for r in current if appliance_of(r) == appliance_of(node) and r != node]
        if held:
            return (f"{name}: node {node} is on appliance {appliance_of(node)}, whose node "
                    f"{held[0]} holds the replica now; moving a replica between the disks of "
                    f"one appliance is not supported")
    return None


def start_move(current: Move, target: tuple[int, ...]) -> Move:
    """The assignment that moves a partition from `current` (perhaps moving already: then
    from its original replicas) to `target` (KIP-455)."""
    original = current.original
    return Move(tuple(dict.fromkeys(target + original)),
                tuple(r for r in target if r not in original),
                tuple(r for r in original if r not in target))


def finish_move(move: Move, state: znodes.PartitionState, live: set[int],
                controller_epoch: int) -> znodes.PartitionState | None:
    """The partition's state that ends `move`, or None while it cannot end yet (a target
    replica is not in the ISR, or no target replica can lead)."""
    target = move.target
    if any(r not in state.isr for r in target):
        return None
    if state.leader in target and state.leader in live:
        leader, leader_epoch = state.leader, state.leader_epoch
    else:
        leader = elect_leader(target, state.isr, live)
        if leader < 0:
            return None
        leader_epoch = state.leader_epoch + 1
    return znodes.PartitionState(leader, leader_epoch,
                                 tuple(r for r in state.isr if r in target), controller_epoch)


def prune_state(replicas: tuple[int, ...], state: znodes.PartitionState, live: set[int],
                controller_epoch: int) -> znodes.PartitionState | None:
    """The state of a partition whose leader or ISR names nodes that are no longer its
    replicas (a cancelled or changed move dropped replicas it was adding), or None if it
    names none. The ISR keeps only replicas; a leader that is not one gives way to the first
    replica live and in that ISR, in leader_epoch + 1 (none: leader -1, offline, as Kafka:
    no unclean election)."""
    isr = tuple(r for r in state.isr if r in replicas)
    if state.leader in replicas or state.leader < 0:
        if isr == state.isr:
            return None
        return znodes.PartitionState(state.leader, state.leader_epoch, isr, controller_epoch)
    leader = elect_leader(replicas, isr, live)
    return znodes.PartitionState(leader, state.leader_epoch + 1, isr if leader >= 0 else
                                 (isr or state.isr), controller_epoch)


def accept_request(snapshot: FleetSnapshot) -> tuple[dict[str, znodes.TopicAssignment],
                                                     list[str]]:
    """The topics' assignments once the pending request is taken up, and what is left out."""
    live = set(snapshot.brokers)
    changed: dict[str, dict[int, Move]] = {}
    refused = [snapshot.reassign_request_error] if snapshot.reassign_request_error else []
    request = snapshot.reassign_request
    for name, partition, replicas in request.partitions if request is not None else ():
        topic = snapshot.topics.get(name)
        problem = refusal(topic, partition, replicas, live,
                          deleting=name in snapshot.deleting)
        if problem is not None:
            refused.append(problem)
            continue
        moves = changed.setdefault(name, _moves(topic))
        moves[partition] = start_move(moves[partition], replicas)
    return {name: _assignment(moves) for name, moves in changed.items()}, refused


def _moves(topic: TopicState) -> dict[int, Move]:
    return {p: Move(r, topic.adding.get(p, ()), topic.removing.get(p, ()))
            for p, r in topic.replicas.items()}


def _assignment(moves: dict[int, Move]) -> znodes.TopicAssignment:
    return znodes.TopicAssignment({p: m.replicas for p, m in moves.items()},
                                  {p: m.adding for p, m in moves.items() if m.adding},
                                  {p: m.removing for p, m in moves.items() if m.removing})


def finishing(topic: TopicState, live: set[int], controller_epoch: int,
              ) -> dict[int, znodes.PartitionState]:
    """The partitions of `topic` whose move can end now, with their new states."""
    done = {}
    for partition, move in _moves(topic).items():
        if move.moving and partition in topic.states:
            state = finish_move(move, topic.states[partition][0], live, controller_epoch)
            if state is not None:
                done[partition] = state
    return done


def pruning(topic: TopicState, live: set[int], controller_epoch: int,
            ) -> dict[int, znodes.PartitionState]:
    """The partitions of `topic` whose state names nodes that are not replicas any more."""
    pruned = {}
    for partition, (state, _) in topic.states.items():
        if partition in topic.replicas:
            new = prune_state(topic.replicas[partition], state, live, controller_epoch)
            if new is not None:
                pruned[partition] = new
    return pruned


# the controller's pass ----------------------------------------------------------------------

def advance(writer, snapshot: FleetSnapshot, *, per_multi: int,
            accept_bytes: int = ACCEPT_BYTES) -> int:
    """Take up a pending request, and end the moves that can end; returns the writes made.
    `writer` is the controller's `FencedWriter`; `Fenced` propagates to the caller.
    At most `per_multi` states of a topic end in one pass: they and the topic's assignment go
    in one multi, which must stay below ZooKeeper's jute.maxbuffer (1 MB; the moves of
    several thousand partitions ending together passed it, and the server dropped the
    controller's connection at every try). A pass that wrote wakes the next, which ends
    more. A request is taken up in multis of at most `accept_bytes` of assignments
    (`_accept`)."""
    writes = 0
    if snapshot.reassign_request is not None:
        writes += _accept(writer, snapshot, max_bytes=accept_bytes)
    live = set(snapshot.brokers)
    epoch = writer.election.epoch
    for name, topic in sorted(snapshot.topics.items()):
        if name in snapshot.deleting:
            continue
        done = finishing(topic, live, epoch) if topic.adding or topic.removing else {}
        done = dict(sorted(done.items())[:per_multi])
        pruned = {p: s for p, s in pruning(topic, live, epoch).items() if p not in done}
        pruned = dict(sorted(pruned.items())[:per_multi - len(done)])
        if done or pruned:
            writes += _finish(writer, topic, done, pruned)
    return writes


def _accept(writer, snapshot: FleetSnapshot, *, max_bytes: int) -> int:
    """Take up the pending request: the named topics' new assignments, then the request's
    deletion. Together in one multi while their assignments fit in `max_bytes`; otherwise
    in several, each behind a check that the request is still the one read, the last one
    deleting it. A topic's assignment lists all its partitions: two topics of 10,000 in one
    request would pass jute.maxbuffer, and the server would drop the controller's connection
    at every try. A pass that stops midway (a topic changed meanwhile, the controller
    deposed or gone) leaves the request in place, and the next pass takes it up again:
    moving a partition to the target it is already moving to, or has reached, changes
    nothing (`start_move`)."""
    assignments, refused = accept_request(snapshot)
    for problem in refused:
        log.error("reassignment request: %s; left out", problem)
    topics = snapshot.topics
    version = snapshot.reassign_request_version
    encoded = {name: assignment.encode() for name, assignment in sorted(assignments.items())}
    batches = _packed(encoded, max_bytes)
    writes = 0
    for i, names in enumerate(batches):
        last = i == len(batches) - 1

        def build(tx, names=names, last=last) -> None:
            for name in names:
                tx.set_data(znodes.topic_path(name), encoded[name],
                            version=topics[name].version)
            if last:
                tx.delete(znodes.REASSIGN_PARTITIONS, version=version)
            else:
                tx.check(znodes.REASSIGN_PARTITIONS, version)
        if not _write(writer, build, znodes.REASSIGN_PARTITIONS):
            return writes
        writes += 1
        for name in names:
            assignment = assignments[name]
            for partition in sorted(set(assignment.adding) | set(assignment.removing)):
                log.info("%s-%d: reassigning, replicas %s (adding %s, removing %s)", name,
                         partition, list(assignment.partitions[partition]),
                         list(assignment.adding.get(partition, ())),
                         list(assignment.removing.get(partition, ())))
    return writes


def _packed(encoded: dict[str, bytes], max_bytes: int) -> list[list[str]]:
    """The topics in batches of at most `max_bytes` of assignments (a topic larger than
    that alone); at least one batch, empty when there are no topics, for the deletion."""
    batches: list[list[str]] = [[]]
    size = 0
    for name, data in encoded.items():
        if batches[-1] and size + len(data) > max_bytes:
            batches.append([])
            size = 0
        batches[-1].append(name)
        size += len(data)
    return batches


def _finish(writer, topic: TopicState, done: dict[int, znodes.PartitionState],
            pruned: dict[int, znodes.PartitionState]) -> int:
    """One multi: the states of the moves that end and of the partitions pruned, and the
    assignment without the ended moves (unless none ends)."""
    moves = _moves(topic)
    for partition in done:
        moves[partition] = Move(moves[partition].target)
    assignment = _assignment(moves)
    states = {**pruned, **done}

    def build(tx) -> None:
        for partition, state in sorted(states.items()):
            tx.set_data(znodes.state_path(topic.name, partition), state.encode(),
                        version=topic.states[partition][1])
        if states:  # the other appliances follow states by their notes
            tx.create(state_changes.PREFIX, state_changes.encode([
                (znodes.state_path(topic.name, p), state, topic.states[p][1] + 1)
                for p, state in sorted(states.items())]), sequence=True)
        if done:
            tx.set_data(znodes.topic_path(topic.name), assignment.encode(),
                        version=topic.version)
    if not _write(writer, build, znodes.topic_path(topic.name)):
        return 0
    for partition, state in sorted(states.items()):
        old = topic.states[partition][0]
        what = "reassigned to" if partition in done else "replicas now"
        log.info("%s-%d: %s %s; leader %d -> %d (epoch %d), isr %s", topic.name, partition,
                 what, list(assignment.partitions[partition]), old.leader, state.leader,
                 state.leader_epoch, list(state.isr))
        if state.leader < 0:
            log.error("%s-%d: no replica in sync can lead: offline", topic.name, partition)
    return 1


def _write(writer, build, path: str) -> bool:
    try:
        writer.write(build)
        return True
    except (BadVersionError, NoNodeError, NodeExistsError) as exc:
        log.info("%s changed meanwhile (%s); the next pass sees it", path, type(exc).__name__)
        return False
