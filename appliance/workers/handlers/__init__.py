"""One handler module per Kafka API; the dispatch table is built from their API_KEY.

A handler is `handle(worker, request)` and returns the response body, an awaitable of it (a
fetch that long-polls, a produce that waits for group commit), or NO_RESPONSE.
"""

from __future__ import annotations

from appliance.workers.handlers import (
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

MODULES = (
    api_versions, metadata, produce, fetch, list_offsets, create_topics, delete_topics,
    init_producer_id, describe_configs, find_coordinator, join_group, sync_group, heartbeat,
    leave_group, offset_commit, offset_fetch, list_groups, describe_groups, delete_groups,
    create_partitions, offset_for_leader_epoch, sasl_handshake, sasl_authenticate,
    describe_acls, create_acls, delete_acls, describe_user_scram_credentials,
    alter_user_scram_credentials, write_txn_markers, add_partitions_to_txn, add_offsets_to_txn,
    end_txn, describe_transactions, list_transactions, txn_offset_commit,
    describe_client_quotas, alter_client_quotas,
    alter_configs, incremental_alter_configs,
    describe_cluster, describe_log_dirs, elect_leaders, alter_partition_reassignments,
    list_partition_reassignments,
    delete_records, offset_delete, describe_producers,
)

HANDLERS = {module.API_KEY: module.handle for module in MODULES}
