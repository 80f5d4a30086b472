"""Partition placement: which worker (disk) owns each new partition. A pure decision.

The rule is Kafka's spirit on one host: spread a topic's partitions round-robin over the
workers, starting from the least loaded one, so that the disks fill evenly and one hot topic
lands on every disk.
"""

from __future__ import annotations


def place_partitions(count: int, load_by_worker: dict[int, int]) -> tuple[int, ...]:
    """Return the owning worker of partitions 0..count-1.

    `load_by_worker` maps every live worker index to the number of partitions it owns now;
    ties go to the lower index so the result is deterministic.
    """
    if not load_by_worker:
        raise ValueError("no worker is available to own partitions")
    load = dict(load_by_worker)
    owners = []
    for _ in range(count):
        worker = min(load, key=lambda w: (load[w], w))
        owners.append(worker)
        load[worker] += 1
    return tuple(owners)
