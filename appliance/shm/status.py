"""`klog status`'s view of a region: everything at one moment, never blocked by a dead writer.

A snapshot reads every used worker slot and every allocated partition slot once. Entries left
mid-update by a dead writer do not fail the snapshot: they are listed in ``problems`` and
their partition appears with ``torn`` set and no log fields. Rates (messages in/out per
second) are the difference of two snapshots divided by the time between them: see
:func:`rates`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .fetch_out import FetchOutTable
from .layout import Header, WorkerState
from .partition_table import FreeSlotError, PartitionTable
from .partition_view import PartitionView
from .seqlock import TornEntryError
from .worker_table import WorkerTable, WorkerView


@dataclass(frozen=True)
class PartitionStatus:
    slot: int
    topic: str
    partition: int
    owner: int
    view: PartitionView | None  # None when torn
    bytes_out: int  # summed over the workers that served it (readable tables only)
    records_out: int
    torn: bool = False


@dataclass(frozen=True)
class Snapshot:
    region: str
    taken_at_ms: int
    header: Header
    generation: int
    workers: list[WorkerView]
    partitions: list[PartitionStatus]
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """Plain data for `--json` (orjson) output."""
        now = self.taken_at_ms
        return {
            "region": self.region,
            "taken_at_ms": now,
            "supervisor_pid": self.header.supervisor_pid,
            "broker_id": self.header.broker_id,
            "created_at_ms": self.header.created_at_ms,
            "generation": self.generation,
            "workers": [{**_plain(w._asdict()), "state": w.state.name,
                         "heartbeat_age_ms": w.heartbeat_age_ms(now)} for w in self.workers],
            "partitions": [_partition_dict(p) for p in self.partitions],
            "problems": list(self.problems),
        }


def snapshot(name: str, header: Header, generation: int, workers: WorkerTable,
             partitions: PartitionTable, fetch_out: FetchOutTable, *, now_ms: int) -> Snapshot:
    problems: list[str] = []
    worker_views = workers.workers()
    for w in worker_views:
        if w.live_torn and w.supervisor_state != WorkerState.DEAD:
            problems.append(f"worker {w.index}: live part left mid-update (pid {w.pid})")
    out_torn: set[int] = set()
    statuses = []
    for (topic, partition), slot in sorted(partitions.slots().items()):
        try:
            view = partitions.read_partition(slot)
        except FreeSlotError:
            continue  # deleted between the scan and the read
        except TornEntryError as exc:
            problems.append(str(exc))
            statuses.append(PartitionStatus(slot, topic, partition, -1, None, 0, 0, torn=True))
            continue
        counts = fetch_out.partition_out(slot, view.epoch)
        out_torn.update(w for w, c in enumerate(counts) if c is None)
        served = [c for c in counts if c is not None]
        statuses.append(PartitionStatus(slot, topic, partition, view.owner, view,
                                        sum(c[0] for c in served), sum(c[1] for c in served)))
    problems.extend(f"worker {w}: fetch-out counters left mid-update" for w in sorted(out_torn))
    return Snapshot(name, now_ms, header, generation, worker_views, statuses, problems)


def rates(before: Snapshot, after: Snapshot) -> dict[tuple[str, int], dict[str, float]]:
    """Per partition: records/bytes in and out per second between two snapshots."""
    seconds = max(after.taken_at_ms - before.taken_at_ms, 1) / 1000
    old = {(p.topic, p.partition): p for p in before.partitions if p.view}
    result = {}
    for p in after.partitions:
        prev = old.get((p.topic, p.partition))
        if p.view is None or prev is None or prev.view.epoch != p.view.epoch:
            continue
        result[(p.topic, p.partition)] = {
            "records_in_per_s": (p.view.records_in - prev.view.records_in) / seconds,
            "bytes_in_per_s": (p.view.bytes_in - prev.view.bytes_in) / seconds,
            "records_out_per_s": (p.records_out - prev.records_out) / seconds,
            "bytes_out_per_s": (p.bytes_out - prev.bytes_out) / seconds,
        }
    return result


def _plain(values: dict) -> dict:
    return {k: (v.name if isinstance(v, WorkerState) else v) for k, v in values.items()
            if not isinstance(v, bytes | bytearray)}


def _partition_dict(p: PartitionStatus) -> dict:
    base = {"slot": p.slot, "topic": p.topic, "partition": p.partition, "owner": p.owner,
            "torn": p.torn, "bytes_out": p.bytes_out, "records_out": p.records_out}
    if p.view is not None:
        base.update(_plain(p.view._asdict()))
        base["hot_index_entries"] = min(p.view.index_total, len(p.view.index_ring) // 8)
    return base
