"""Every write of a partition state, told to every appliance in the same transaction.

Why: after an appliance's death the controller rewrites every partition state that named it
(with replication factor 3 on three appliances: all of them, 10,000 in issue 26). With a
data watch on each state, every other appliance then got 10,000 watch events, which kazoo
hands to Python one at a time on its one connection thread (a few thousand a second), and
read each state back, one znode per request: its workers heard of the new leaders 6-8 s
after ZooKeeper had them. Kafka's controller in ZooKeeper mode does not make brokers read
the states back either: it sends them (LeaderAndIsr, UpdateMetadata). In klog each multi
that writes states (the controller's, a leader appliance's ISR change in `isr.py`, a
reassignment's end) also creates one sequential znode, `/klog/state_changes/change-<seq>`,
holding those states with the versions they get. An appliance watches the directory, reads
one znode per multi (`StateChangeFollower`), shows the states at once (`apply_changes`) and
keeps them for its fleet passes, which read present states without a watch
(`WatchedReads.get_noted`, `note`).

Rules that keep the view as good as a read:
- a note holds what ZooKeeper committed: it is in the same multi as its states, so it
  exists only if they were written, with exactly the versions it names, and its czxid is
  their mzxid;
- a note replaces a kept state only if it is the later write (zxid); it is shown for a
  topic only if the topic's assignment is older than the note (a note about a deleted
  topic never lands on a new one of the same name), and a state kept from a deleted topic
  is read again (`fleet_view`);
- each pass first reads the notes written before it, so a write of our own, answered
  before the pass began, is in it;
- a read of the fleet that comes back older than what a note showed does not take a state
  back (`keep_newer`); a state the read no longer has (its topic being deleted) is not
  restored;
- the newest KEEP notes are kept. An appliance that may have missed one (the newest it took
  is gone and KEEP newer ones are there) reads every state again; each kept state is also
  read again within the member's FULL_READ_INTERVAL_S, as every other cached znode.
A state written by hand, without a note, is seen by that re-read only.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import NamedTuple

import orjson

from cluster import znodes
from cluster.session import NoNodeError, Session, ZooKeeperUnavailable

log = logging.getLogger(__name__)

ROOT = znodes.STATE_CHANGES
PREFIX = f"{ROOT}/change-"
KEEP = 200  # notes kept: 40,000 states at 200 per multi
RELIST_S = 1.0  # the directory is listed at least this often, watch or not

class Change(NamedTuple):
    topic: str
    partition: int
    state: znodes.PartitionState
    version: int
    zxid: int  # of the transaction that wrote it (the note's czxid, the state's mzxid)
    path: str
    data: bytes  # the state znode's content


def encode(states: list[tuple[str, znodes.PartitionState, int]]) -> bytes:
    """A note of `(state path, state, version it gets)`."""
    return orjson.dumps({"version": 1, "states": [
        [path, version, state.encode().decode()] for path, state, version in states]})


def decode(data: bytes, zxid: int, where: str) -> list[Change]:
    """The changes of one note, written at `zxid`. Raises ZnodeError naming `where`."""
    try:
        raw = orjson.loads(data)
        out = []
        for path, version, state in raw["states"]:
            _, _, _, topic, _, partition, _ = path.split("/")
            data = state.encode()
            out.append(Change(topic, int(partition), znodes.PartitionState.decode(data, path),
                              int(version), zxid, path, data))
        return out
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise znodes.ZnodeError(f"{where}: not a note of state changes: {exc!r}") from None


def prune(session: Session) -> None:
    """Delete all but the newest KEEP notes (after the controller wrote some). A note
    another appliance pruned meanwhile is no error, and neither is an ensemble out of
    reach: the writes it follows have landed, and a later prune does the same."""
    try:
        names = session.call("get_children", ROOT)
        stale = sorted(names, key=_sequence)[:-KEEP]
        if stale:
            session.delete_many([f"{ROOT}/{name}" for name in stale])
    except (NoNodeError, ZooKeeperUnavailable) as exc:
        log.debug("state notes not pruned now: %r", exc)


def _sequence(name: str) -> int:
    try:
        return int(name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def apply_changes(snapshot, changes: list[Change]):
    """`snapshot` (a FleetSnapshot) with the changes that are newer than what it holds
    (module docstring); the same object if none is."""
    topics = snapshot.topics
    changed: dict[str, dict] = {}
    for name, partition, state, version, zxid, _, _ in changes:
        topic = topics.get(name)
        if topic is None or zxid <= topic.created or partition not in topic.replicas:
            continue
        states = changed.get(name)
        held = (topic.states if states is None else states).get(partition)
        if held is not None and held[1] >= version:
            continue
        if states is None:
            states = changed[name] = dict(topic.states)
        states[partition] = (state, version)
    if not changed:
        return snapshot
    return dataclasses.replace(snapshot, topics={
        **topics, **{name: dataclasses.replace(topics[name], states=states)
                     for name, states in changed.items()}})


def unknown_topics(snapshot, changes: list[Change]) -> bool:
    """Whether some change is about a topic (or partition) `snapshot` does not hold, or holds
    as an older topic of the same name: `apply_changes` cannot show it, a read must."""
    topics = snapshot.topics
    for change in changes:
        topic = topics.get(change.topic)
        if topic is None or change.zxid <= topic.created or \
                change.partition not in topic.replicas:
            return True
    return False


def keep_newer(read, shown):
    """`read` (a fresh FleetSnapshot) keeping the states `shown` holds at a higher version
    of the same znode: a read that began before a note was applied must not undo it."""
    replaced: dict = {}
    for name, topic in read.topics.items():
        old = shown.topics.get(name)
        if old is None or old.created != topic.created or old.states is topic.states:
            continue
        states = None
        for partition, (state, version) in old.states.items():
            got = topic.states.get(partition)
            if got is not None and got[1] < version:
                if states is None:
                    states = dict(topic.states)
                states[partition] = (state, version)
        if states is not None:
            replaced[name] = dataclasses.replace(topic, states=states)
    if not replaced:
        return read
    return dataclasses.replace(read, topics={**read.topics, **replaced})


class StateChangeFollower:
    """Reads the notes as they come, on a thread of its own (kazoo's callback thread must
    not block, and the fleet pass may be in the middle of a long read), and hands their
    changes to `apply` (on the calling thread). Notes older than its first listing are
    skipped: whoever starts it reads the whole fleet anyway. `missed` is called when notes
    may have been pruned before they were read (the newest one taken is gone)."""

    def __init__(self, session: Session, apply: Callable[[list[Change]], None], *,
                 missed: Callable[[], None] = lambda: None, name: str = "klog-state-changes"):
        self.session = session
        self.apply = apply
        self.missed = missed
        self._poll_lock = threading.Lock()  # the thread's polls and its owner's
        self.notes_read = 0  # statistics, tests
        self.count = 0  # notes in the directory at the last listing
        self._last: int | None = None  # the newest sequence taken; None: not listed yet
        self.listed = threading.Event()  # set once the first listing is done
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _watch(self, _event=None) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            try:
                self.poll()
            except ZooKeeperUnavailable as exc:
                log.debug("state notes not read now: %s", exc)
            except Exception:  # noqa: BLE001 - a bad note must not end the thread
                log.exception("reading the controller's state notes failed")
            self._wake.wait(RELIST_S)
            self._wake.clear()

    def poll(self) -> int:
        """Read the notes written since the last call and apply them; how many changes.
        Any thread. Raises ZooKeeperUnavailable."""
        with self._poll_lock:
            return self._poll()

    def _poll(self) -> int:
        try:
            names = self.session.call("get_children", ROOT, watch=self._watch)
        except NoNodeError:
            return 0
        numbered = sorted((_sequence(name), name) for name in names)
        self.count = len(numbered)
        if self._last is None:
            self._last = numbered[-1][0] if numbered else -1
            self.listed.set()
            return 0
        new = [(seq, name) for seq, name in numbered if seq > self._last]
        if not new:
            return 0
        if self._last >= 0 and all(seq != self._last for seq, _ in numbered) and \
                len(numbered) >= KEEP:
            log.warning("the controller's state notes moved on by more than %d since the "
                        "last read: reading every state again", KEEP)
            self.missed()
        self._last = new[-1][0]
        changes: list[Change] = []
        for (_, name), got in zip(new, self.session.get_many([f"{ROOT}/{n}" for _, n in new])):
            if got is None:
                continue  # pruned meanwhile: the fleet pass reads those states
            try:
                changes += decode(got[0], got[1].czxid, f"{ROOT}/{name}")
            except znodes.ZnodeError as exc:  # its states unknown: read every state again
                log.error("%s; reading every state again", exc)
                self.missed()
        self.notes_read += len(new)
        if changes:
            self.apply(changes)
        return len(changes)


__all__ = ["KEEP", "PREFIX", "ROOT", "StateChangeFollower", "apply_changes", "decode",
           "encode", "keep_newer", "prune", "unknown_topics"]
