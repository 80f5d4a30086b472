"""What replication may use of its worker: the declared surface, instead of the whole object.

The worker builds one `ReplicaContext` and hands it to its partitions, their manager and the
fetchers; none of them sees the `Worker`, its connections or its handlers (an import contract
in pyproject.toml keeps it so). A new dependency of replication shows up as a change here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from appliance.control.interface import ControlPlane
from appliance.segments.group_commit import GroupCommitter
from appliance.workers.replication.dialing import LinkSecurity
from appliance.workers.replication.fetch_settings import ReplicaFetchSettings
from appliance.workers.replication.waiters import AppendWaiters
from appliance.workers.shared_state import Publisher


class IsrStatistics(Protocol):
    def isr_changed(self, before: int, after: int) -> None:
        """A leader's ISR change was written: from `before` replicas in sync to `after`."""


class _NoStatistics:
    def isr_changed(self, before: int, after: int) -> None:
        pass


@dataclass
class ReplicaContext:
    node_id: int  # this worker's node (a replica's id in the partition states)
    worker_index: int  # the owner index `TopicInfo.owners` names
    log_dir: Path
    control: ControlPlane  # topics, the fleet's nodes and configs, AlterPartition
    publisher: Publisher  # the shm region: every worker reads what a partition publishes
    waiters: AppendWaiters  # long-polling fetches, woken by appends and high watermarks
    committer: GroupCommitter  # acks=all waits for its fdatasync
    replica_lag_time_max_ms: int = 30_000
    statistics: IsrStatistics = field(default_factory=_NoStatistics)
    # how followers dial leaders: the inter-broker listener, client id, TLS, SASL
    link_security: LinkSecurity = field(default_factory=LinkSecurity)
    clock: Callable[[], float] = time.time
    fetch: ReplicaFetchSettings = field(default_factory=ReplicaFetchSettings)  # replica.fetch.*

    def now_ms(self) -> int:
        return int(self.clock() * 1000)
