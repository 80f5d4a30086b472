"""What a handler may use of its worker: the declared surface, instead of the whole object.

Handlers (`appliance/workers/handlers/`) and the group coordinator receive the `Worker`, but
type it as `HandlerContext`, so the facts and services they rely on are listed here and a
new dependency shows up as a change to this protocol. The Worker implements it; a test
checks that it still does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from appliance.config import BrokerConfig
from appliance.control.interface import ControlPlane
from appliance.control.topics import FleetNode, TopicInfo
from appliance.scram_credentials import BroadcastCredentials, ScramCredentialFile
from appliance.security.authorizer import AuthorizerSettings
from appliance.segments.group_commit import GroupCommitter
from appliance.segments.readable import ReadableLog
from klog.protocol.error_codes import ErrorCode

if TYPE_CHECKING:  # the worker's own parts: imported for their types only
    from appliance.workers.client_quotas import QuotaEnforcer
    from appliance.workers.dynamic_settings import DynamicSettings
    from appliance.workers.groups.coordinator import GroupCoordinator
    from appliance.workers.replication.manager import ReplicaManager
    from appliance.workers.replication.replicas import LocalReplicas
    from appliance.workers.replication.waiters import AppendWaiters
    from appliance.workers.transactions.coordinator import TransactionCoordinator


class HandlerContext(Protocol):
    config: BrokerConfig
    control: ControlPlane
    index: int
    node_id: int
    controller_node_id: int
    cluster_id: str
    log_dir: Path
    partitions: LocalReplicas  # the worker's own partitions: the only ones it may append to
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    committer: GroupCommitter  # acks=all and group commits wait on its fdatasync
    waiters: AppendWaiters  # long-polling fetches wait here for appends
    replication: ReplicaManager  # cluster mode: roles, followers, ISR changes
    dynamic: DynamicSettings  # the static config under the brokers' dynamic configs
    advertised_api_versions: list  # ApiVersions' answer, from the handlers this worker has
    authorizer: AuthorizerSettings | None  # None: no authorizer, every request is allowed
    # the SCRAM users: `users()` and `lookup(user, mechanism)` (appliance/scram_credentials)
    scram_credentials: ScramCredentialFile | BroadcastCredentials
    quotas: QuotaEnforcer  # client quotas: the store (`quotas.store`) and the sensors

    def now_ms(self) -> int: ...

    def nodes(self, listener: str = "") -> list[FleetNode]:
        """The nodes that serve now, at their endpoints of `listener`, as Metadata lists
        them."""

    def node_id_of(self, worker_index: int) -> int: ...

    def partition_leader(self, info: TopicInfo, index: int,
                         listener: str = "") -> FleetNode | None:
        """The live node leading a partition (at its endpoint of `listener`), or None while it
        is offline."""

    def leads(self, topic: str, index: int) -> bool:
        """Whether appends to the partition belong to this worker."""

    def is_serving(self, worker_index: int) -> bool: ...

    def high_watermark_of(self, topic: str, index: int) -> int | None: ...

    def readable_log(self, topic: str, index: int) -> ReadableLog | None:
        """The log a Fetch reads (this worker's own or another's through shm), or None."""

    def absent_partition_error(self, topic: str, index: int) -> ErrorCode: ...

    def note_fetched(self, topic: str, index: int, nbytes: int) -> None: ...
