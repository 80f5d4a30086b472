"""What a worker may ask of its supervisor's control plane, and what it hears back: the one
interface workers use.

Today one implementation serves it, `ControlPlaneClient` (the worker's end of the supervisor's
control channel). Cluster mode puts the fleet's controller behind the same interface, so a
worker never needs a second code path to know whether its appliance runs alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from appliance.control.channel import AlterPartition, Reload
from appliance.control.topics import FleetNode, TopicInfo, TopicResult
from appliance.scram_credentials import ScramChange
from appliance.security.acls import AclBinding, AclFilter
from appliance.security.authorizer import AclIndex
from appliance.segments.config import LogConfig
from klog.protocol.error_codes import ErrorCode

TopicListener = Callable[[str, TopicInfo | None], None]
# a worker's: (name, the topic or None once deleted, the indexes of the partitions that
# changed when only those did, else None)
WorkerTopicListener = Callable[[str, TopicInfo | None, tuple[int, ...] | None], None]
ReloadListener = Callable[[Reload], None]
# the decisions' side: (live nodes, the controller's node id)
FleetListener = Callable[[dict[int, FleetNode], int], None]


class ControlPlane(Protocol):
    """Topic decisions and the facts a worker follows.

    Reads (`topics`, `topic`) answer from what the worker has already been told and never
    block. Requests (`create_topic`, `delete_topic`, `allocate_producer_id`) go to the
    supervisor and return its decision; by the time one returns, the worker has already seen
    the catalog change it caused. They raise `ControlChannelError` when the supervisor is gone.
    """

    defaults: LogConfig
    default_partitions: int
    cluster_id: str
    # cluster mode only (None / -1 alone): the fleet's live nodes and its controller's node
    fleet_nodes: dict[int, FleetNode] | None
    fleet_controller_id: int
    # cluster mode: the nodes' dynamic configs (/config/brokers/<node>; {} alone)
    fleet_node_configs: dict[int, dict[str, str]]
    # the ACLs in force (with an authorizer; empty without), as last told
    acls: AclIndex
    # the dynamic config store (appliance.control.dynamic_configs): type -> name -> configs
    dynamic_configs: dict[str, dict[str, dict[str, str]]]

    def topics(self) -> list[TopicInfo]: ...

    def topic(self, name: str) -> TopicInfo | None: ...

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None, *,
                     validate_only: bool = False) -> TopicResult: ...

    def delete_topic(self, name: str) -> TopicResult: ...

    def create_partitions(self, name: str, count: int, *,
                          validate_only: bool = False) -> TopicResult:
        """Raise the topic's partition count to `count` (the new total); the controller
        places the new partitions as it places a new topic's."""

    def alter_topic_configs(self, name: str, configs: dict[str, str], *,
                            validate_only: bool = False) -> TopicResult:
        """Replace the topic's config overrides by `configs` (checked: INVALID_CONFIG naming
        the key, UNKNOWN_TOPIC_OR_PARTITION). By the time it returns, `topic(name)` has them."""

    def alter_dynamic_configs(self, entity_type: str, name: str,
                              changes: dict[str, str | None]) -> tuple[ErrorCode, str | None]:
        """Set (str) or remove (None) keys of one entity of the dynamic config store; the
        caller checked them. By the time it returns NONE, `dynamic_configs` has them."""

    def add_dynamic_config_listener(self, listener: Callable[[dict], None]) -> None:
        """`listener(entities)` runs after each change of the dynamic config store."""

    def allocate_producer_id(self) -> int:
        """A producer id no other producer has; -1 when none can be had now (cluster mode,
        ZooKeeper unreachable): a retriable condition."""

    def create_acls(self, acls: list[AclBinding]) -> tuple[ErrorCode, str | None]:
        """Add valid ACLs; (error, message). By the time it returns, `acls` has them."""

    def delete_acls(self, filters: list[AclFilter]
                    ) -> tuple[ErrorCode, str | None, tuple[AclBinding, ...]]:
        """Remove the ACLs the filters match; (error, message, the ACLs removed)."""

    def alter_scram(self, changes: list[ScramChange]) -> tuple[ErrorCode, str | None]:
        """Store or remove SCRAM credentials (checked already); (error, message). Alone the
        appliance's file, in a fleet ZooKeeper; by the time it returns in a fleet,
        `scram_users` has them."""

    def cluster_admin(self, op: str, args: str) -> tuple[ErrorCode, str | None]:
        """Cluster mode: a fleet admin request (`cluster/admin_requests.py`), its arguments
        and answer as JSON; (error, answer). Blocks until the fleet answered (bounded)."""

    def alter_partition(self, request: AlterPartition,
                        on_done: Callable[[ErrorCode], None]) -> None:
        """Cluster mode: this worker leads the partition in `request.leader_epoch` and asks
        for its ISR to become `request.isr`. Returns at once: the answer is a ZooKeeper
        write away, which the worker's loop must not wait for. `on_done(error)` runs when it
        comes: NONE once written; FENCED_LEADER_EPOCH or NOT_LEADER_OR_FOLLOWER when the
        partition moved on meanwhile (the broadcast of its new state follows);
        REQUEST_TIMED_OUT while ZooKeeper cannot be reached."""

    def add_listener(self, listener: WorkerTopicListener) -> None:
        """`listener(name, info, changed)` runs after a topic is created or changed (info) or
        deleted (None); `changed` names the partitions that changed when only some of them
        did (cluster mode), else is None."""

    def add_reload_listener(self, listener: ReloadListener) -> None:
        """`listener(reload)` runs after the supervisor reloaded its config (SIGHUP)."""
