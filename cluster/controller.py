"""The fleet controller's duties, run by the elected appliance only: election and fenced writes.

`elect` tries to become controller as Kafka does: one multi creates the ephemeral
`/controller` and moves `/controller_epoch` to epoch + 1 from the version it read; whoever
loses the race sees NodeExists or BadVersion. The winner keeps the epoch's new stat version
and starts every later write with a check of it (`FencedWriter`): once another appliance has
been elected, or our session has expired, every write fails with `Fenced` instead of landing.

`reconcile` brings partition states in line with the fleet, level-triggered from a snapshot:
new partitions get their first states in one multi per topic (leader: first live replica;
ISR: the live replicas); every other partition is settled by `leadership.settle` (a leader
that is gone or shutting down replaced from the ISR with leader_epoch + 1, unclean election
only where the topic enables it, dead and leaving nodes out of the ISR); requested
deletions are carried out; partition reassignments move on (`cluster.reassignment`). Nodes
of an appliance in a controlled shutdown count as live but never lead. Each state is
written with its expected version, so a state changed meanwhile is left for the next pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

from cluster import state_changes, znodes
from cluster.fleet_view import FleetSnapshot, TopicState
from cluster.leadership import UNCLEAN, nodes_of, settle, unclean_enabled
from cluster.placement import elect_leader
from cluster.reassignment import advance as advance_reassignments
from cluster.session import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    Session,
)

log = logging.getLogger(__name__)

GROUP = 200  # partition states per fenced multi: about 40 KB, far below jute.maxbuffer's 1 MB
# decisions of one pass logged each at INFO; the rest at DEBUG, with a count by reason at INFO:
# after an appliance's death the controller decides for every partition it held (10,000 in
# issue 26), and writing 10,000 lines took 0.2-0.4 s before the first new leader was written
LOGGED_DECISIONS = 50


class Fenced(RuntimeError):
    """This appliance is no longer the controller: its write was refused by ZooKeeper."""


@dataclass(frozen=True)
class Election:
    epoch: int
    epoch_version: int  # the stat version of /controller_epoch our writes must still see


def ensure_epoch_node(session: Session) -> None:
    with contextlib.suppress(NodeExistsError):
        session.call("create", znodes.CONTROLLER_EPOCH, b"0", makepath=True)


def elect(session: Session, broker_id: int) -> Election | None:
    """Become the controller, or None if another appliance is (or won the race)."""
    ensure_epoch_node(session)
    session.call("ensure_path", znodes.STATE_CHANGES)  # every state multi notes there
    data, stat = session.call("get", znodes.CONTROLLER_EPOCH)
    epoch = znodes.decode_epoch(data) + 1
    results = session.transaction(lambda tx: (
        tx.create(znodes.CONTROLLER, znodes.ControllerRecord(broker_id).encode(),
                  ephemeral=True),
        tx.set_data(znodes.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)))
    if any(isinstance(r, Exception) for r in results):
        return None
    log.info("appliance %d is the fleet's controller, epoch %d", broker_id, epoch)
    return Election(epoch, stat.version + 1)


class FencedWriter:
    """Every write of the controller: a multi that first checks our controller epoch."""

    def __init__(self, session: Session, election: Election):
        self.session = session
        self.election = election

    def write(self, build) -> None:
        """Commit `build(tx)` behind the epoch check; Fenced if we were deposed, BadVersion
        (stale state: re-read and try later) or NoNode/NodeExists as ZooKeeper reports."""
        def fenced(tx):
            tx.check(znodes.CONTROLLER_EPOCH, self.election.epoch_version)
            build(tx)
        failed = self._failure(self.session.transaction(fenced))
        if failed is not None:
            raise failed

    def write_many(self, builds: list) -> list[Exception | None]:
        """`write` for each of `builds`, pipelined (`Session.transactions`): per build, None
        or the error it met (BadVersion, NoNode, NodeExists). Fenced if any was fenced."""
        def fenced(build):
            def guarded(tx):
                tx.check(znodes.CONTROLLER_EPOCH, self.election.epoch_version)
                build(tx)
            return guarded
        errors = [self._failure(results) for results in
                  self.session.transactions([fenced(build) for build in builds])]
        for error in errors:
            if isinstance(error, Fenced):
                raise error
        return errors

    def write_grouped(self, builds: list,
                      note: Callable[[range], bytes] | None = None) -> list[Exception | None]:
        """`write_many`, with up to `GROUP` builds in one multi behind one epoch check.
        ZooKeeper pays per transaction, not per op: after a kill -9 of an appliance that
        held a replica of every partition, 4,000 state writes as one multi each took 1.6-2 s
        on an idle ensemble and 6 s on a busy one; grouped, 0.05-0.2 s (issue 26). A group
        that fails because one of its states changed meanwhile (BadVersion, NoNode) is
        written again one multi per build, so one stale state costs only itself.
        `note(span)`: the content of a state note (`state_changes`) created in each
        multi, for the builds of `span` (indices into `builds`), the one-by-one retries'
        too: the other appliances follow states by their notes only."""
        spans = [range(start, min(start + GROUP, len(builds)))
                 for start in range(0, len(builds), GROUP)]

        def noted(span):
            def build(tx):
                for i in span:
                    builds[i](tx)
                if note is not None:
                    tx.create(state_changes.PREFIX, note(span), sequence=True)
            return build

        def together(span):
            def guarded(tx):
                tx.check(znodes.CONTROLLER_EPOCH, self.election.epoch_version)
                noted(span)(tx)
            return guarded
        errors: list[Exception | None] = []
        for span, results in zip(spans, self.session.transactions(
                [together(span) for span in spans])):
            error = self._failure(results)
            if isinstance(error, Fenced):
                raise error
            errors += [None] * len(span) if error is None else \
                self.write_many([noted(range(i, i + 1)) for i in span])
        if note is not None and any(error is None for error in errors):
            state_changes.prune(self.session)
        return errors

    def _failure(self, results) -> Exception | None:
        if isinstance(results, Exception):  # the multi as a whole failed (kazoo's own error)
            return results
        if isinstance(results[0], BadVersionError | NoNodeError):
            return Fenced(f"controller epoch {self.election.epoch} is no longer current")
        # the op that failed; the ones before it were rolled back, the ones after not tried
        return next((r for r in results if isinstance(r, Exception)
                     and not isinstance(r, RolledBackError | RuntimeInconsistency)), None)


def reconcile(writer: FencedWriter, snapshot: FleetSnapshot, *,
              unclean_default: bool = False, written: list | None = None) -> int:
    """One pass of the controller's duties; returns the number of writes made.
    `unclean_default`: the broker's unclean.leader.election.enable (topics may override).
    `written`: if given, gets `(topic, partition, state, version)` of each partition state
    this pass created or settled, as ZooKeeper now holds it (`with_states`)."""
    live = set(snapshot.brokers)
    shutting = nodes_of(snapshot.shutting_down, live)
    writes = 0
    for name in sorted(snapshot.deleting):
        writes += _delete_topic(writer, snapshot.topics.get(name), name)
    # (path, new state, version) of the partitions whose leader changes, and of the rest.
    # When an appliance dies, every partition it held a replica of needs a write (with
    # replication factor 3 on three appliances: all of them), but only those it led are
    # unavailable until theirs lands; the writes go in pipelined chunks
    # (`Session.PIPELINE_CHUNK`), so with the elections first every partition is led after a
    # third of the writes, not all of them (issue 26)
    moving, shrinking = [], []
    decisions = Decisions()
    for name, topic in sorted(snapshot.topics.items()):
        if name in snapshot.deleting:
            continue
        fresh = [p for p in sorted(topic.replicas) if p not in topic.states]
        if fresh:
            writes += _create_states(writer, topic, fresh, live - shutting, written)
        unclean = unclean_enabled(topic.config, unclean_default)
        for partition, replicas in sorted(topic.replicas.items()):
            if partition in topic.states:
                change = _settle_partition(writer, topic, partition, replicas, live,
                                           shutting, unclean, decisions)
                if change is not None:
                    leader = topic.states[partition][0].leader
                    (moving if change[1].leader != leader else shrinking).append(
                        (*change, name, partition))
    decisions.summarize()
    # the leader elections first, then the ISR shrinks: one pipelined round trip per chunk
    changes = moving + shrinking
    errors = write_states(writer, [change[:3] for change in changes])
    for (_, state, version, name, partition), error in zip(changes, errors):
        if error is None:
            writes += 1
            if written is not None:
                written.append((name, partition, state, version + 1))
    return writes + advance_reassignments(writer, snapshot, per_multi=GROUP)


def with_states(snapshot: FleetSnapshot, written: list) -> FleetSnapshot:
    """`snapshot` with the partition states the controller has just written (`reconcile`'s
    `written`): what its next pass will read back, known now. Its own appliance hears of
    the new leaders at once, not after reading back every state it wrote (10,000 after an
    appliance's death: 5.5 s on a loaded host, issue 26)."""
    by_topic: dict[str, dict] = {}
    for name, partition, state, version in written:
        by_topic.setdefault(name, {})[partition] = (state, version)
    topics = dict(snapshot.topics)
    for name, states in by_topic.items():
        topic = topics.get(name)
        if topic is not None:
            topics[name] = dataclasses.replace(topic, states={**topic.states, **states})
    return dataclasses.replace(snapshot, topics=topics)


def write_states(writer: FencedWriter, changes: list) -> list[Exception | None]:
    """Write partition states `(path, state, expected version)`, each a conditional set,
    grouped into fenced multis (`FencedWriter.write_grouped`), all pipelined (one round
    trip); per change None, or the error of one that changed meanwhile (left for the next
    pass). Fenced if we were deposed."""
    errors = writer.write_grouped([
        lambda tx, p=path, s=state, v=version: tx.set_data(p, s.encode(), version=v)
        for path, state, version in changes], note=lambda span: state_changes.encode(
            [(changes[i][0], changes[i][1], changes[i][2] + 1) for i in span]))
    for (path, _, _), error in zip(changes, errors):
        if error is not None:
            log.info("%s changed meanwhile (%s); the next pass sees it", path,
                     type(error).__name__)
    return errors


def _create_states(writer: FencedWriter, topic: TopicState, partitions: list[int],
                   live: set[int], written: list | None = None) -> int:
    """First states of a new topic's (or its added) partitions: each leader is its first
    live replica, each ISR its live replicas. GROUP partitions (their parent znodes, states
    and note) to a fenced multi, all pipelined. A multi must stay below ZooKeeper's
    `jute.maxbuffer` (1 MB by default): one multi for all of a topic's 10,000 partitions
    (about 2 MB) made the server drop the controller's connection at every try, and the topic
    never had a leader (issue 26). A multi that fails (a state created meanwhile) leaves its
    partitions to the next pass, which creates those still missing. Returns the multis
    written."""
    epoch = writer.election.epoch
    states = {}
    for partition in partitions:
        replicas = topic.replicas[partition]
        isr = tuple(r for r in replicas if r in live) or replicas
        states[partition] = znodes.PartitionState(elect_leader(replicas, isr, live), 0, isr,
                                                  epoch)
    root = znodes.partitions_path(topic.name)
    parents = [znodes.partition_path(topic.name, p) for p in partitions]
    found = writer.session.get_many([root] + parents)
    if found[0] is None and not _write(writer, lambda tx: tx.create(root, b""), root):
        return 0
    missing = {path for path, got in zip(parents, found[1:]) if got is None}
    chunks = [partitions[i:i + GROUP] for i in range(0, len(partitions), GROUP)]

    def build_of(chunk: list[int]):
        def build(tx) -> None:
            for partition in chunk:
                parent = znodes.partition_path(topic.name, partition)
                if parent in missing:
                    tx.create(parent, b"")
                tx.create(znodes.state_path(topic.name, partition), states[partition].encode())
            # the appliance that asked (and every other) hears at once
            tx.create(state_changes.PREFIX, state_changes.encode(
                [(znodes.state_path(topic.name, p), states[p], 0) for p in chunk]),
                sequence=True)
        return build
    done = 0
    for chunk, error in zip(chunks, writer.write_many([build_of(c) for c in chunks])):
        if error is not None:
            log.info("%s partitions %d..%d changed meanwhile (%s); the next pass sees them",
                     topic.name, chunk[0], chunk[-1], type(error).__name__)
            continue
        done += 1
        if written is not None:
            written += [(topic.name, p, states[p], 0) for p in chunk]
    if done:
        state_changes.prune(writer.session)
    return done


class Decisions:
    """The partition decisions of one pass, for the log: the first LOGGED_DECISIONS at INFO,
    the rest at DEBUG, and when there were more, one INFO line at the end counting them by
    reason."""

    def __init__(self):
        self.by_reason: dict[str, int] = {}

    def log(self, message: str, *args, reason: str) -> None:
        count = sum(self.by_reason.values())
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
        log.log(logging.INFO if count < LOGGED_DECISIONS else logging.DEBUG, message, *args)

    def summarize(self) -> None:
        total = sum(self.by_reason.values())
        if total > LOGGED_DECISIONS:
            log.info("controller: %d partition decisions in this pass (%s); the first %d "
                     "logged above, the rest at DEBUG", total, ", ".join(
                         f"{count} {reason}" for reason, count in
                         sorted(self.by_reason.items(), key=lambda item: -item[1])),
                     LOGGED_DECISIONS)


def _settle_partition(writer: FencedWriter, topic: TopicState, partition: int,
                      replicas: tuple[int, ...], live: set[int], shutting: set[int],
                      unclean: bool, decisions: Decisions,
                      ) -> tuple[str, znodes.PartitionState, int] | None:
    """The state write that settles the partition (logged: `Decisions`), or None."""
    path = znodes.state_path(topic.name, partition)
    state, version = topic.states[partition]
    change = settle(state, replicas, live=live, shutting=shutting, unclean=unclean,
                    controller_epoch=writer.election.epoch)
    if change is None:
        return None
    new = change.state
    if change.reason == UNCLEAN:
        log.warning("%s-%d: UNCLEAN leader election: no in-sync replica of %s is live, so "
                    "out-of-sync replica %d leads (epoch %d); records only the old ISR had "
                    "are lost (unclean.leader.election.enable=true)", topic.name, partition,
                    list(state.isr), new.leader, new.leader_epoch)
    decisions.log(
        "%s-%d: leader %d -> %d (epoch %d), isr %s: %s", topic.name, partition, state.leader,
        new.leader, new.leader_epoch, list(new.isr), change.reason, reason=change.reason)
    return path, new, version


def _write(writer: FencedWriter, build, path: str) -> int:
    try:
        writer.write(build)
        return 1
    except (BadVersionError, NoNodeError, NodeExistsError) as exc:
        log.info("%s changed meanwhile (%s); the next pass sees it", path, type(exc).__name__)
        return 0


def _delete_topic(writer: FencedWriter, topic: TopicState | None, name: str) -> int:
    """Remove the topic's znodes (states, partitions, assignment, config) and the request:
    the partitions' GROUP to a fenced multi (pipelined; a multi must stay below
    `jute.maxbuffer`, which the znodes of 10,000 partitions exceed), then the topic's own in
    a last one. One that fails (raced) leaves the rest to the next pass, which reads again
    what is left."""
    groups = []  # per GROUP partitions: children before their parents
    if topic is not None:
        partitions = sorted(topic.replicas)
        for start in range(0, len(partitions), GROUP):
            groups.append([path for p in partitions[start:start + GROUP] for path in
                           (znodes.state_path(name, p), znodes.partition_path(name, p))])
    tail = [znodes.partitions_path(name), znodes.topic_path(name),
            znodes.topic_config_path(name), znodes.delete_request_path(name)]
    # which exist, in pipelined reads (one round trip per chunk, not one per znode)
    paths = [path for group in groups for path in group] + tail
    existing = {path for path, got in zip(paths, writer.session.get_many(paths))
                if got is not None}
    groups = [[p for p in group if p in existing] for group in groups]
    errors = writer.write_many([lambda tx, g=group: [tx.delete(p) for p in g]
                                for group in groups if group])
    try:  # the topic's own znodes only once every partition's are gone
        failed = next((error for error in errors if error is not None), None)
        if failed is not None:
            raise failed
        writer.write(lambda tx: [tx.delete(p) for p in tail if p in existing])
    except (NoNodeError, BadVersionError, NotEmptyError) as exc:
        log.info("deleting %s raced another change (%s); retried on the next pass", name, exc)
        return 0
    log.info("deleted topic %s", name)
    return 1
