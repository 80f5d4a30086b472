"""The rules every fault test checks, as pure functions of what the test observed.

Plain data in (`Observations`), a list of violations out (empty: the run kept every
promise). Values are `<producer>-<seq>`: which client wrote a record and its number in that
client's sequence, so a record read anywhere says where it came from.

The rules (each function below says what it takes):
- **acknowledged survive**: every acknowledged record is in the final read of its partition,
  at the offset its acknowledgement named, and some member of the group consumed it;
- **one record per offset**: the acknowledgements, everything the group read and the final
  read never give one (partition, offset) two values; replicas on disk agree on every batch
  they both hold (base offset, last offset, leader epoch, CRC), and a record read at an
  offset carries the leader epoch of the batch the replicas hold there; at the end, the
  replicas the assignment names hold the same batches, and no other appliance holds any;
- **order, no duplicates**: in each partition a producer's values first appear in its
  sequence order; an idempotent producer's never twice;
- **consumed in order**: while a member owns a partition it reads consecutive offsets;
- **one leader per epoch**: the partition states seen never give one leader epoch two
  leaders, never go back to an older epoch, and the epochs stamped in a replica's batches
  never go down;
- **committed offsets survive**: the group's committed offsets, as read back over time,
  never go down; a member assigned a partition resumes exactly where the group's commits
  left it, and so do the final committed offsets and a member joining the group after the
  others left (`possible_commits` says which commits that can be).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Ack:
    producer: str
    seq: int
    partition: int
    offset: int

    @property
    def value(self) -> str:
        return f"{self.producer}-{self.seq}"


@dataclass(frozen=True)
class Read:
    partition: int
    offset: int
    value: str
    leader_epoch: int | None = None


@dataclass(frozen=True)
class GroupEvent:
    """What a member did, in the order it did it (one journal for the whole group):
    `assigned`/`revoked` a partition, `read` a record, began `committing` an offset, which
    was then `committed` (acknowledged) or `commit-failed` (`value` names the attempt), or
    the test `observed` the group's committed offset (offset) of a partition."""

    member: str
    kind: str
    partition: int
    offset: int = -1
    value: str = ""
    leader_epoch: int | None = None


@dataclass(frozen=True)
class StateSeen:
    """One version of a partition's state znode."""

    partition: int
    version: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True)
class Batch:
    base_offset: int
    last_offset: int
    leader_epoch: int
    crc: int


@dataclass
class Observations:
    acks: list[Ack] = field(default_factory=list)
    idempotent: set[str] = field(default_factory=set)  # producers that must never duplicate
    group: list[GroupEvent] = field(default_factory=list)
    final_read: dict[int, list[Read]] = field(default_factory=dict)  # partition -> records
    final_committed: dict[int, int] = field(default_factory=dict)  # after the members left
    states: list[StateSeen] = field(default_factory=list)
    replicas: dict[str, dict[int, list[Batch]]] = field(default_factory=dict)  # holder -> p
    holders: dict[int, list[str]] = field(default_factory=dict)  # p -> the assignment's


def parse(value: str) -> tuple[str, int]:
    producer, _, seq = value.rpartition("-")
    return producer, int(seq)


def check(seen: Observations) -> list[str]:
    """Every violation of every rule (module docstring)."""
    return (acknowledged_survive(seen) + one_record_per_offset(seen) + order(seen)
            + consumed_in_order(seen.group) + one_leader_per_epoch(seen.states)
            + epochs_on_disk(seen.replicas) + commits_survive(seen))


def acknowledged_survive(seen: Observations) -> list[str]:
    final = {(p, r.offset): r.value for p, reads in seen.final_read.items() for r in reads}
    anywhere = {(p, r.value) for p, reads in seen.final_read.items() for r in reads}
    consumed = {e.value for e in seen.group if e.kind == "read"}
    out = []
    for ack in seen.acks:
        if ack.offset is None or ack.offset < 0:  # acknowledged without its offset
            if (ack.partition, ack.value) not in anywhere:
                out.append(f"acknowledged {ack.value} is missing from partition "
                           f"{ack.partition} in the final read")
        elif (found := final.get((ack.partition, ack.offset))) != ack.value:
            out.append(f"acknowledged {ack.value} at {ack.partition}@{ack.offset} is "
                       f"{'missing' if found is None else repr(found)} in the final read")
        if ack.value not in consumed:
            out.append(f"acknowledged {ack.value} ({ack.partition}@{ack.offset}) was never "
                       f"consumed by the group")
    return out


def one_record_per_offset(seen: Observations) -> list[str]:
    values: dict[tuple[int, int], set[str]] = defaultdict(set)
    for ack in seen.acks:
        if ack.offset is not None and ack.offset >= 0:
            values[(ack.partition, ack.offset)].add(ack.value)
    reads = [r for reads in seen.final_read.values() for r in reads]
    reads += [Read(e.partition, e.offset, e.value, e.leader_epoch) for e in seen.group
              if e.kind == "read"]
    for read in reads:
        values[(read.partition, read.offset)].add(read.value)
    out = [f"offset {p}@{o} holds {sorted(v)}" for (p, o), v in sorted(values.items())
           if len(v) > 1]
    out += replicas_agree(seen.replicas)
    out += replicas_match_assignment(seen.replicas, seen.holders)
    out += read_epochs_match(reads, seen.replicas)
    return out


def replicas_agree(replicas: dict[str, dict[int, list[Batch]]]) -> list[str]:
    """Two replicas holding a batch at the same base offset hold the same batch."""
    by_offset: dict[tuple[int, int], dict[Batch, list[str]]] = defaultdict(
        lambda: defaultdict(list))
    for holder, partitions in replicas.items():
        for partition, batches in partitions.items():
            for batch in batches:
                by_offset[(partition, batch.base_offset)][batch].append(holder)
    return [f"replicas disagree at {p}@{o}: " + "; ".join(
                f"{sorted(holders)}: last {b.last_offset} epoch {b.leader_epoch} crc {b.crc}"
                for b, holders in found.items())
            for (p, o), found in sorted(by_offset.items()) if len(found) > 1]


def replicas_match_assignment(replicas: dict[str, dict[int, list[Batch]]],
                              holders: dict[int, list[str]]) -> list[str]:
    """Each partition's replicas, as the final assignment names them, hold the same batches
    (the writers have stopped and the followers caught up); no other holder has a log of it
    (a replica moved away is deleted)."""
    out = []
    for partition, names in sorted(holders.items()):
        held = {name: replicas.get(name, {}).get(partition) for name in names}
        missing = sorted(name for name, batches in held.items() if batches is None)
        if missing:
            out.append(f"partition {partition}: no replica on {missing}, which the "
                       f"assignment names")
        kinds = {tuple(b) for b in held.values() if b is not None}
        if len(kinds) > 1:
            out.append(f"partition {partition}: its replicas hold different batches: " + "; ".join(
                f"{name}: {len(b)} batches ending at {b[-1].last_offset if b else -1}"
                for name, b in sorted(held.items()) if b is not None))
        strays = sorted(name for name, partitions in replicas.items()
                        if partition in partitions and name not in names)
        if strays:
            out.append(f"partition {partition}: {strays} still hold a log of it, outside "
                       f"the assignment {sorted(names)}")
    return out


def read_epochs_match(reads: list[Read], replicas) -> list[str]:
    """A record read carries the leader epoch of the batch every replica holds there."""
    epochs: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for partitions in replicas.values():
        for partition, batches in partitions.items():
            epochs[partition] += [(b.base_offset, b.last_offset, b.leader_epoch)
                                  for b in batches]
    out = []
    for read in reads:
        if read.leader_epoch is None or read.leader_epoch < 0:
            continue
        held = {e for base, last, e in epochs.get(read.partition, ())
                if base <= read.offset <= last}
        if held and held != {read.leader_epoch}:
            out.append(f"{read.value} read at {read.partition}@{read.offset} in leader epoch "
                       f"{read.leader_epoch}; the replicas hold epoch {sorted(held)} there")
    return out


def order(seen: Observations) -> list[str]:
    """In each partition, the first time each value of a producer appears follows its
    sequence. A producer that is not idempotent may write a batch again after a retry (an
    acknowledgement lost with a leader), so only first appearances count for it; an
    idempotent producer's values appear once."""
    out = []
    for partition, reads in sorted(seen.final_read.items()):
        last: dict[str, int] = {}
        where: dict[str, list[int]] = defaultdict(list)
        for read in reads:
            where[read.value].append(read.offset)
        for read in reads:
            producer, seq = parse(read.value)
            if where[read.value][0] != read.offset:
                continue  # a repeat: counted below
            before = last.get(producer)
            if before is not None and seq < before:
                out.append(f"{read.value} at {partition}@{read.offset} after "
                           f"{producer}-{before}: out of order")
            last[producer] = seq
        out += [f"{value} written {len(offsets)} times in partition {partition} by an "
                f"idempotent producer, at {offsets}"
                for value, offsets in sorted(where.items())
                if len(offsets) > 1 and parse(value)[0] in seen.idempotent]
    return out


def consumed_in_order(group: list[GroupEvent]) -> list[str]:
    """While a member owns a partition, each record it reads is at the previous offset + 1."""
    last: dict[tuple[str, int], int | None] = {}
    out = []
    for event in group:
        key = (event.member, event.partition)
        if event.kind in ("assigned", "revoked"):
            last[key] = None
        elif event.kind == "read":
            before = last.get(key)
            if before is not None and event.offset != before + 1:
                out.append(f"{event.member} read {event.partition}@{event.offset} right "
                           f"after {event.partition}@{before}")
            last[key] = event.offset
    return out


def one_leader_per_epoch(states: list[StateSeen]) -> list[str]:
    leaders: dict[tuple[int, int], set[int]] = defaultdict(set)
    newest: dict[int, StateSeen] = {}
    out = []
    for state in sorted(states, key=lambda s: (s.partition, s.version)):
        leaders[(state.partition, state.leader_epoch)].add(state.leader)
        before = newest.get(state.partition)
        if before is not None and state.leader_epoch < before.leader_epoch:
            out.append(f"partition {state.partition}: leader epoch went from "
                       f"{before.leader_epoch} back to {state.leader_epoch} "
                       f"(version {state.version})")
        newest[state.partition] = state
    out += [f"partition {p}: leader epoch {e} had leaders {sorted(ls)}"
            for (p, e), ls in sorted(leaders.items()) if len(ls) > 1]
    return out


def epochs_on_disk(replicas: dict[str, dict[int, list[Batch]]]) -> list[str]:
    out = []
    for holder, partitions in sorted(replicas.items()):
        for partition, batches in sorted(partitions.items()):
            for before, batch in zip(batches, batches[1:]):
                if batch.leader_epoch < before.leader_epoch:
                    out.append(f"{holder} partition {partition}: batch at {batch.base_offset} "
                               f"has epoch {batch.leader_epoch} after epoch "
                               f"{before.leader_epoch}")
                if batch.base_offset != before.last_offset + 1:
                    out.append(f"{holder} partition {partition}: batch at {batch.base_offset} "
                               f"follows one ending at {before.last_offset}")
    return out


@dataclass
class CommitAttempt:
    """One offset commit of one partition, as the journal saw it: `begun` and `resolved` are
    positions in the journal (`resolved` None while it is in flight)."""

    offset: int
    begun: int
    resolved: int | None = None
    acknowledged: bool = False


def possible_commits(attempts: list[CommitAttempt]) -> set[int]:
    """Where the group's committed offset of a partition can be, given every commit attempt
    so far (the last landed write wins): an attempt that may have landed, unless an
    acknowledged one began after it had ended (that one landed later, over it). Before any
    acknowledged commit the group may have none (0: the members read from the start)."""
    out = {a.offset for a in attempts
           if not any(b.acknowledged and b is not a and a.resolved is not None
                      and b.begun > a.resolved for b in attempts)}
    if not any(a.acknowledged for a in attempts):
        out.add(0)
    return out


def commits_survive(seen: Observations) -> list[str]:
    out = []
    attempts: dict[int, dict[str, CommitAttempt]] = defaultdict(dict)  # partition -> id ->
    observed: dict[int, int] = {}
    resuming: dict[tuple[str, int], set[int]] = {}  # (member, partition) -> where it may
    for at, event in enumerate(seen.group):
        p = event.partition
        if event.kind == "committing":
            attempts[p][event.value] = CommitAttempt(event.offset, at)
        elif event.kind in ("committed", "commit-failed"):
            attempt = attempts[p].setdefault(event.value or f"#{at}",
                                             CommitAttempt(event.offset, at))
            attempt.resolved = at
            attempt.acknowledged = event.kind == "committed"
        elif event.kind == "observed":
            if event.offset < observed.get(p, -1):
                out.append(f"the group's committed offset of partition {p} went back from "
                           f"{observed[p]} to {event.offset}")
            observed[p] = max(observed.get(p, -1), event.offset)
        elif event.kind == "assigned":
            resuming[(event.member, p)] = possible_commits(list(attempts[p].values()))
        elif event.kind == "read" and (event.member, p) in resuming:
            possible = resuming.pop((event.member, p))
            if event.offset not in possible:
                out.append(f"{event.member} resumed partition {p} at {event.offset}; the "
                           f"group's commits left it at {_either(possible)}")
        elif event.kind == "revoked":
            resuming.pop((event.member, p), None)
    for p, made in sorted(attempts.items()):
        possible = possible_commits(list(made.values()))
        final = seen.final_committed.get(p, 0)
        if final not in possible:
            out.append(f"the group's final committed offset of partition {p} is {final}; its "
                       f"commits left it at {_either(possible)}")
    return out + resumes_at_committed(seen)


def _either(offsets: set[int]) -> str:
    return " or ".join(str(o) for o in sorted(offsets))


def resumes_at_committed(seen: Observations) -> list[str]:
    """The last member to join (`resumer`) starts each partition where the group left it."""
    first: dict[int, int] = {}
    for event in seen.group:
        if event.member == "resumer" and event.kind == "read":
            first.setdefault(event.partition, event.offset)
    return [f"the resumer started partition {p} at {offset}, the group had committed "
            f"{seen.final_committed.get(p, 0)}"
            for p, offset in sorted(first.items())
            if offset != seen.final_committed.get(p, 0)]
