"""The APIs klog speaks: one table that feeds both ApiVersions and the dispatcher.

Each API has its own module declaring its request and response fields for every version we
*advertise*; :data:`API_BY_KEY` says which of those versions we *serve*. Why the two differ:
old librdkafka (kcat) switches features such as compression on only when the advertised range
overlaps old versions, so we advertise e.g. Produce 0-8 but serve 3-8; a version advertised but
not served is answered UNSUPPORTED_VERSION (DESIGN.md, "Wire protocol: what to serve").

Each module also has ``error_response(request_body_or_None, version, code)``: the smallest valid
response carrying ``code`` wherever that version can express it, or None when it cannot (the
caller then closes the connection). :func:`klog.protocol.server.error_response` is the front.

Each API module receives ``SPEC``, its row of the table below (``produce.SPEC.key == 0``), so
code that holds a module can reach its key and ranges without a second lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from klog.protocol.apis import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_partition_reassignments,
    alter_user_scram_credentials,
    api_versions,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)
from klog.protocol.schema import Message

ErrorResponse = Callable[[Any, int, int], Any]


@dataclass(frozen=True)
class ApiSpec:
    """One API: its key and name, the version ranges we advertise and serve (inclusive), its
    request and response declarations, and how to answer it with an error."""

    key: int
    name: str
    advertised: tuple[int, int]
    served: tuple[int, int]
    request: type[Message]
    response: type[Message]
    error_response: ErrorResponse

    def __post_init__(self) -> None:
        low, high = self.advertised
        if not low <= self.served[0] <= self.served[1] <= high:
            raise ValueError(f"{self.name}: served {self.served} not within {self.advertised}")
        for message in (self.request, self.response):
            if low not in message.versions or high not in message.versions:
                raise ValueError(f"{message.__name__} does not declare {self.advertised}")

    def serves(self, version: int) -> bool:
        return self.served[0] <= version <= self.served[1]

    def advertises(self, version: int) -> bool:
        return self.advertised[0] <= version <= self.advertised[1]


def api_versions_response(error_code: int = 0, throttle_time_ms: int = 0) -> Any:
    """The ApiVersions answer: every API we advertise, with its advertised range. It is also
    the answer to an ApiVersions request at a version we do not serve (KIP-511)."""
    return api_versions.ApiVersionsResponse(
        error_code=error_code,
        throttle_time_ms=throttle_time_ms,
        api_keys=[
            api_versions.ApiVersion(api_key=s.key, min_version=s.advertised[0],
                                    max_version=s.advertised[1])
            for s in API_BY_KEY.values()
        ],
    )  # fmt: skip


def _spec(module: Any, name: str, advertised: tuple[int, int], served: tuple[int, int]) -> ApiSpec:
    error = getattr(module, "error_response", None) or (
        lambda request, version, code: api_versions_response(code)
    )
    spec = ApiSpec(module.KEY, name, advertised, served, module.Request, module.Response, error)
    module.SPEC = spec
    return spec


API_BY_KEY: dict[int, ApiSpec] = {
    spec.key: spec
    for spec in sorted(
        [
            _spec(produce, "Produce", (0, 10), (3, 10)),
            _spec(fetch, "Fetch", (0, 12), (4, 12)),
            _spec(list_offsets, "ListOffsets", (1, 8), (1, 8)),
            _spec(metadata, "Metadata", (0, 8), (1, 8)),
            _spec(offset_commit, "OffsetCommit", (0, 7), (2, 7)),
            _spec(offset_fetch, "OffsetFetch", (0, 7), (1, 7)),
            _spec(find_coordinator, "FindCoordinator", (0, 2), (0, 2)),
            _spec(join_group, "JoinGroup", (0, 5), (1, 5)),
            _spec(heartbeat, "Heartbeat", (0, 3), (0, 3)),
            _spec(leave_group, "LeaveGroup", (0, 3), (0, 3)),
            _spec(sync_group, "SyncGroup", (0, 3), (0, 3)),
            _spec(describe_groups, "DescribeGroups", (0, 4), (0, 4)),
            _spec(list_groups, "ListGroups", (0, 2), (0, 2)),
            _spec(api_versions, "ApiVersions", (0, 3), (0, 3)),
            _spec(create_topics, "CreateTopics", (0, 4), (2, 4)),
            _spec(delete_topics, "DeleteTopics", (0, 3), (1, 3)),
            _spec(init_producer_id, "InitProducerId", (0, 4), (0, 4)),
            _spec(add_partitions_to_txn, "AddPartitionsToTxn", (0, 5), (0, 5)),
            _spec(add_offsets_to_txn, "AddOffsetsToTxn", (0, 3), (0, 3)),
            _spec(end_txn, "EndTxn", (0, 3), (0, 3)),
            _spec(txn_offset_commit, "TxnOffsetCommit", (0, 3), (0, 3)),
            _spec(write_txn_markers, "WriteTxnMarkers", (0, 1), (0, 1)),
            _spec(describe_configs, "DescribeConfigs", (0, 3), (0, 3)),
            _spec(delete_groups, "DeleteGroups", (0, 1), (0, 1)),
            _spec(create_partitions, "CreatePartitions", (0, 1), (0, 1)),
            _spec(offset_for_leader_epoch, "OffsetForLeaderEpoch", (2, 3), (2, 3)),
            _spec(sasl_handshake, "SaslHandshake", (0, 1), (0, 1)),
            _spec(sasl_authenticate, "SaslAuthenticate", (0, 2), (0, 2)),
            _spec(describe_acls, "DescribeAcls", (0, 3), (0, 3)),
            _spec(create_acls, "CreateAcls", (0, 3), (0, 3)),
            _spec(delete_acls, "DeleteAcls", (0, 3), (0, 3)),
            _spec(describe_user_scram_credentials, "DescribeUserScramCredentials", (0, 0),
                  (0, 0)),
            _spec(alter_user_scram_credentials, "AlterUserScramCredentials", (0, 0), (0, 0)),
            _spec(describe_transactions, "DescribeTransactions", (0, 0), (0, 0)),
            _spec(list_transactions, "ListTransactions", (0, 1), (0, 1)),
            _spec(describe_client_quotas, "DescribeClientQuotas", (0, 1), (0, 1)),
            _spec(alter_client_quotas, "AlterClientQuotas", (0, 1), (0, 1)),
            _spec(alter_configs, "AlterConfigs", (0, 2), (0, 2)),
            _spec(incremental_alter_configs, "IncrementalAlterConfigs", (0, 1), (0, 1)),
            _spec(describe_cluster, "DescribeCluster", (0, 1), (0, 1)),
            _spec(describe_log_dirs, "DescribeLogDirs", (0, 4), (0, 4)),
            _spec(elect_leaders, "ElectLeaders", (0, 2), (0, 2)),
            _spec(alter_partition_reassignments, "AlterPartitionReassignments", (0, 0), (0, 0)),
            _spec(list_partition_reassignments, "ListPartitionReassignments", (0, 0), (0, 0)),
            _spec(delete_records, "DeleteRecords", (0, 2), (0, 2)),
            _spec(offset_delete, "OffsetDelete", (0, 0), (0, 0)),
            _spec(describe_producers, "DescribeProducers", (0, 0), (0, 0)),
        ],
        key=lambda spec: spec.key,
    )
}

API_BY_NAME: dict[str, ApiSpec] = {spec.name: spec for spec in API_BY_KEY.values()}
