"""What a partition of ``__consumer_offsets`` holds, and how its state is rebuilt from it.

Two kinds of record, keyed so that the latest record of a key is its value (the log is read
like a compacted Kafka topic; a null value is a tombstone):

- ``["offset", group, topic, partition]`` -> ``{"offset", "epoch", "metadata", "ts"}``: a
  committed offset;
- ``["group", group]`` -> the group's last completed generation: protocol, leader and members
  with their subscriptions and assignments, so a restarted coordinator keeps the members
  heartbeating instead of forcing every group through a rebalance.

An offset record in a *transactional* batch (TxnOffsetCommit: the producer's id and epoch,
KIP-98) is pending until that producer's control batch: COMMIT makes it committed, ABORT drops
it (``pending.py``; a transaction still open at the log end stays pending). A replay follows
the same rules as the live coordinator, so both agree.

Keys and values are JSON (orjson), not Kafka's binary schemas: klog reads them back itself,
and ``klog consume __consumer_offsets`` shows them legibly. Bytes (subscriptions,
assignments) are hex.

Compaction is by snapshot: :func:`snapshot_records` restates the live state; the coordinator
appends it after a roll and then moves the log start past everything older, so a load replays
at most one snapshot plus what followed it. A load (:func:`replay`) reads from the log start
to the log end, not to the high watermark: a worker that has just become the partition's
leader may not have heard yet that its last records are committed (the old leader's high
watermark reaches followers with their next fetch), and whatever the new leader's log holds
is what the partition will hold (its followers truncate to it).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import orjson

from appliance.workers.groups.group import Group, GroupLimits, Member
from appliance.workers.groups.pending import PendingOffsets
from appliance.workers.groups.state import GroupState
from klog.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, control_type, decode_batches

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
LOAD_READ_BYTES = 1 << 20


class Committed(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=1 << 16)  # asked on every group request; groups are few
def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``partitionFor``: a group lives in this partition of __consumer_offsets."""
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions


# -- encoding --------------------------------------------------------------------------------

def offset_record(group_id: str, topic: str, partition: int,
                  committed: Committed | None) -> tuple[bytes, bytes | None]:
    key = orjson.dumps(["offset", group_id, topic, partition])
    if committed is None:
        return key, None
    return key, orjson.dumps({"offset": committed.offset, "epoch": committed.leader_epoch,
                              "metadata": committed.metadata, "ts": committed.commit_ms})


def group_record(group: Group) -> tuple[bytes, bytes | None]:
    key = orjson.dumps(["group", group.group_id])
    if group.state is GroupState.DEAD:
        return key, None
    members = [{"id": m.member_id, "instance": m.instance_id, "client_id": m.client_id,
                "host": m.client_host, "session": m.session_timeout_ms,
                "rebalance": m.rebalance_timeout_ms,
                "protocols": [[name, meta.hex()] for name, meta in m.protocols],
                "assignment": m.assignment.hex()}
               for m in group.members.values()] if group.state is GroupState.STABLE else []
    return key, orjson.dumps({"generation": group.generation,
                              "protocol_type": group.protocol_type,
                              "protocol": group.protocol if members else None,
                              "leader": group.leader if members else None,
                              "members": members})


# -- decoding --------------------------------------------------------------------------------

class LoadedPartition:
    """The state one partition's records add up to: the latest value of every key."""

    def __init__(self) -> None:
        self.offsets: dict[str, dict[tuple[str, int], Committed]] = {}
        self.groups: dict[str, dict] = {}
        self.pending = PendingOffsets()  # transactional offsets whose marker is not read yet
        self.skipped = 0  # records that are not ours (bad JSON, unknown kind): logged
        self.records = 0  # records replayed

    def apply(self, key: bytes | None, value: bytes | None,
              producer: tuple[int, int] | None = None) -> None:
        """One record; ``producer`` (id, epoch) for a record of a transactional batch, whose
        offset stays pending until the producer's marker (``marker``)."""
        try:
            kind, group_id, *rest = orjson.loads(key)
            if kind == "offset":
                topic, partition = rest
                committed = self.offsets.setdefault(group_id, {})
                if producer is not None:
                    if value is not None:
                        self.pending.add(*producer, group_id,
                                         {(topic, partition): _committed(value)})
                    return
                self.pending.supersede(group_id, [(topic, partition)])
                if value is None:
                    committed.pop((topic, partition), None)
                else:
                    committed[(topic, partition)] = _committed(value)
            elif kind == "group":
                if value is None:
                    self.groups.pop(group_id, None)
                    self.offsets.pop(group_id, None)
                    self.pending.drop_groups(lambda g: g == group_id)
                else:
                    self.groups[group_id] = orjson.loads(value)
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except (orjson.JSONDecodeError, TypeError, ValueError, KeyError) as exc:
            self.skipped += 1
            if self.skipped <= 10:
                log.warning("%s: skipping a record that is not klog's (%s): key %r",
                            OFFSETS_TOPIC, exc, (key or b"")[:100])

    def apply_all(self, records: Iterable[tuple[bytes | None, bytes | None]],
                  producer: tuple[int, int] | None = None) -> None:
        for key, value in records:
            self.apply(key, value, producer)

    def marker(self, producer_id: int, commit: bool) -> None:
        """The producer's transaction ended here: its pending offsets commit or go."""
        done = self.pending.complete(producer_id, lambda group_id: True)
        if commit:
            for group_id, offsets in done.items():
                self.offsets.setdefault(group_id, {}).update(offsets)

    def build_groups(self, limits: GroupLimits, now_ms: int) -> dict[str, Group]:
        """Groups as they were at their last completed generation; the members get a full
        session to show up again."""
        groups = {}
        for group_id in self.groups.keys() | self.offsets.keys():
            saved = self.groups.get(group_id)
            group = Group(group_id, limits)
            if saved is not None:
                group.generation = int(saved["generation"])
                group.protocol_type = saved["protocol_type"]
                for raw in saved["members"]:
                    member = Member(
                        raw["id"], raw["instance"], raw["client_id"], raw["host"],
                        int(raw["session"]), int(raw["rebalance"]), saved["protocol_type"],
                        [(name, bytes.fromhex(meta)) for name, meta in raw["protocols"]],
                        bytes.fromhex(raw["assignment"]),
                        deadline_ms=now_ms + int(raw["session"]))
                    group.members[member.member_id] = member
                    if member.instance_id is not None:
                        group.static[member.instance_id] = member.member_id
                if group.members:
                    group.state = GroupState.STABLE
                    group.protocol, group.leader = saved["protocol"], saved["leader"]
            groups[group_id] = group
        return groups


def _committed(value: bytes) -> Committed:
    v = orjson.loads(value)
    return Committed(int(v["offset"]), int(v["epoch"]), v["metadata"], int(v["ts"]))


def snapshot_records(groups: Iterable[Group],
                     offsets: dict[str, dict[tuple[str, int], Committed]]
                     ) -> Iterator[tuple[bytes, bytes | None]]:
    """Every live key once: what a load needs when it starts at the snapshot."""
    for group in groups:
        if group.state is not GroupState.DEAD:
            yield group_record(group)
    for group_id, committed in offsets.items():
        for (topic, partition), value in committed.items():
            yield offset_record(group_id, topic, partition, value)


def replay(plog, state: LoadedPartition, *, chunk_bytes: int = LOAD_READ_BYTES) -> Iterator[None]:
    """Apply a partition's records, from its log start to its log end, to ``state``, one
    read of ``chunk_bytes`` at a time, yielding after each: a caller on an event loop lets
    others run between reads. The end is the log end when the last read is done, so a marker
    that lands while a cluster-mode load runs is read too (the coordinator ignores markers
    of a partition it is still loading). Transactional batches stay pending until their
    producer's marker. Raises StorageError, OffsetOutOfRangeError (the log was cut
    meanwhile: its leadership moved)."""
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        piece = plog.read_replica(offset, chunk_bytes)
        if not piece:
            break
        for header, records in decode_batches(piece.read()):
            if header.is_control:
                if records and header.base_offset >= offset:
                    kind = control_type(records[0])
                    if kind in (CONTROL_COMMIT, CONTROL_ABORT):
                        state.marker(header.producer_id, kind == CONTROL_COMMIT)
            else:
                producer = ((header.producer_id, header.producer_epoch)
                            if header.is_transactional else None)
                state.apply_all(((r.key, r.value) for r in records if r.offset >= offset),
                                producer)
            state.records += len(records)
            offset = header.base_offset + header.last_offset_delta + 1
        yield
