"""ISR changes asked by a partition's leader, written by the leader's own appliance.

Who writes: the leader's appliance, with a conditional set on the partition's state znode,
not the fleet's controller. This is Kafka's ZooKeeper-mode design (the leader's broker
updated `.../partitions/<p>/state` itself with the zkVersion it last read; AlterPartition
later moved the same check into the controller). Why not the controller's fenced writer:
the controller may be another appliance, and a round trip to it would add a channel of its
own for one conditional write; the version check is all the safety there is to get:

- every leader election by the controller rewrites the state, so its version moves: a
  deposed or paused leader's write fails with BadVersion, and on re-reading it finds
  another leader or a higher leader epoch and gives up (FENCED_LEADER_EPOCH);
- a concurrent change by the controller (a dead replica leaving the ISR) is never
  overwritten: the write is redone on what was re-read, or abandoned if it no longer
  applies;
- a replica of an appliance in a controlled shutdown is not taken back into the ISR
  (INELIGIBLE_REPLICA, as Kafka's AlterPartition answers): it is still live and fetching,
  but the controller took it out so that acks=all stops waiting for it. The requests are
  read after the state, so a removal the state shows is never undone by a stale view.

Many at once (`alter_partitions`): a broker that comes back rejoins the ISR of every partition
it holds within a second, and each change as above costs three round trips and a note that
every appliance then reads. So the asks that reach the supervisor together are read in one
pipelined round trip and written in one multi (and one note) per BATCH states; a multi is
all or nothing, so when one of its states changed meanwhile (BadVersion) each of its asks is
done again alone, by `alter_partition`, which re-reads and decides again.

The written state keeps the controller epoch it had: that field records which controller
last elected, which this write does not change. It goes with its note, in one multi
(`state_changes.py`): the other appliances follow states by their notes, not by watches.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from cluster import state_changes, znodes
from cluster.leadership import nodes_of
from cluster.session import BadVersionError, NoNodeError, Session
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

ATTEMPTS = 5
BATCH = 200  # states per multi of `alter_partitions`, and per note (below jute.maxbuffer)


class IsrAsk(NamedTuple):
    """One leader's ask: `alter_partition`'s arguments."""

    topic: str
    partition: int
    leader_epoch: int
    isr: tuple[int, ...]
    leader: int
    replicas: tuple[int, ...] | None = None


def alter_partition(session: Session, topic: str, partition: int, leader_epoch: int,
                    isr: tuple[int, ...], leader: int,
                    replicas: tuple[int, ...] | None = None) -> ErrorCode:
    """Make `isr` the ISR of `topic`-`partition` if `leader` still leads it in
    `leader_epoch`. The ISR must hold the leader and (when known) only replicas. Raises
    ZooKeeperUnavailable."""
    ask = IsrAsk(topic, partition, leader_epoch, isr, leader, replicas)
    if _malformed(ask):
        return ErrorCode.INVALID_REQUEST
    path = znodes.state_path(topic, partition)
    for _ in range(ATTEMPTS):
        try:
            data, stat = session.call("get", path)
        except NoNodeError:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        state = znodes.PartitionState.decode(data, path)
        answer = _answer_without_write(ask, state, lambda: _shutting_down(session))
        if answer is not None:
            return answer
        new = _new_state(ask, state)
        # with its note, in one transaction: the other appliances follow states by notes
        results = session.transaction(lambda tx, v=stat.version, new=new: (
            tx.set_data(path, new.encode(), version=v),
            tx.create(state_changes.PREFIX, state_changes.encode([(path, new, v + 1)]),
                      sequence=True)))
        if isinstance(results, Exception) or isinstance(results[0], BadVersionError):
            continue  # changed meanwhile: decide again on what it is now
        if isinstance(results[0], NoNodeError):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if any(isinstance(r, Exception) for r in results):
            log.error("%s-%d: the ISR change was refused: %s", topic, partition, results)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        _log_change(ask, state)
        return ErrorCode.NONE
    return ErrorCode.REQUEST_TIMED_OUT


def _malformed(ask: IsrAsk) -> bool:
    """An ISR without its leader, or (when they are known) with a non-replica."""
    return ask.leader not in ask.isr or (ask.replicas is not None and
                                         any(r not in ask.replicas for r in ask.isr))


def _answer_without_write(ask: IsrAsk, state: znodes.PartitionState,
                          shutting_down) -> ErrorCode | None:
    """The answer when `state` (read now) leaves nothing to write, else None.
    `shutting_down()` lists the appliances in a controlled shutdown; it is asked only when
    the ask adds replicas, after the state was read (module docstring)."""
    if state.leader != ask.leader or state.leader_epoch != ask.leader_epoch:
        return (ErrorCode.FENCED_LEADER_EPOCH if state.leader_epoch > ask.leader_epoch
                else ErrorCode.NOT_LEADER_OR_FOLLOWER)
    if sorted(state.isr) == sorted(ask.isr):
        return ErrorCode.NONE
    added = set(ask.isr) - set(state.isr)
    if added and nodes_of(shutting_down(), added):
        return ErrorCode.INELIGIBLE_REPLICA
    return None


def _new_state(ask: IsrAsk, state: znodes.PartitionState) -> znodes.PartitionState:
    return znodes.PartitionState(ask.leader, ask.leader_epoch, tuple(ask.isr),
                                 state.controller_epoch)


def _log_change(ask: IsrAsk, state: znodes.PartitionState) -> None:
    log.info("%s-%d: leader %d (epoch %d) changed the ISR %s -> %s", ask.topic, ask.partition,
             ask.leader, ask.leader_epoch, list(state.isr), list(ask.isr))


def alter_partitions(session: Session, asks: list[IsrAsk]) -> list[ErrorCode]:
    """`alter_partition` for each of `asks`, together (module docstring); an ErrorCode per
    ask, in order. Raises ZooKeeperUnavailable."""
    results: list[ErrorCode | None] = [None] * len(asks)
    valid = []
    for i, ask in enumerate(asks):
        if _malformed(ask):
            results[i] = ErrorCode.INVALID_REQUEST
        else:
            valid.append(i)
    paths = [znodes.state_path(asks[i].topic, asks[i].partition) for i in valid]
    shutting: list[int] | None = None

    def shutting_down() -> list[int]:  # read once for the burst, after its states
        nonlocal shutting
        if shutting is None:
            shutting = _shutting_down(session)
        return shutting
    writes = []  # (ask's index, path, new state, version read, state read)
    for i, path, got in zip(valid, paths, session.get_many(paths), strict=True):
        if got is None:
            results[i] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        data, stat = got
        state = znodes.PartitionState.decode(data, path)
        results[i] = _answer_without_write(asks[i], state, shutting_down)
        if results[i] is None:
            writes.append((i, path, _new_state(asks[i], state), stat.version, state))
    chunks = [writes[start:start + BATCH] for start in range(0, len(writes), BATCH)]

    def build(chunk):
        def write(tx):
            for _, path, new, version, _ in chunk:
                tx.set_data(path, new.encode(), version=version)
            tx.create(state_changes.PREFIX, state_changes.encode(
                [(path, new, version + 1) for _, path, new, version, _ in chunk]),
                sequence=True)
        return write
    outcomes = session.transactions([build(chunk) for chunk in chunks]) if chunks else []
    for chunk, outcome in zip(chunks, outcomes, strict=True):
        if isinstance(outcome, Exception) or any(isinstance(r, Exception) for r in outcome):
            for i, *_ in chunk:  # one of them changed meanwhile: each alone, deciding again
                ask = asks[i]
                results[i] = alter_partition(session, ask.topic, ask.partition,
                                             ask.leader_epoch, ask.isr, ask.leader,
                                             ask.replicas)
            continue
        for i, _, _, _, state in chunk:
            _log_change(asks[i], state)
            results[i] = ErrorCode.NONE
    return results  # type: ignore[return-value]


def _shutting_down(session: Session) -> list[int]:
    """The appliances (broker ids) in a controlled shutdown now."""
    try:
        return [int(c) for c in session.call("get_children", znodes.CONTROLLED_SHUTDOWN)]
    except NoNodeError:
        return []
