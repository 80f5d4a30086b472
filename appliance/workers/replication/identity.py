"""Who may fetch as a replica: the replica fetcher's client id, and the leader's check of it.

A Fetch with `replica_id` >= 0 moves that follower's recorded log end, the high watermark and
the ISR, so a leader must not believe a stray client that reuses a node id. With an
authorizer the connection's principal needs ClusterAction on the cluster (the handlers ask
it); in every case the request must come in on the inter-broker listener and carry the client
id that `replica_client_id` gives: the fleet's cluster id (`/cluster/id`) and the node id.
That id is no secret (any ZooKeeper reader sees the cluster id): without TLS or SASL it stops
accidents (a tool that sends replica_id 3, a client of another fleet), not an attacker, who
needs SASL on the inter-broker listener and ACLs to be kept out.
A request that fails the check is answered as Kafka answers a replica id that is not a
replica of the partition: NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

CLIENT_ID_PREFIX = "klog-replica-"


def replica_client_id(cluster_id: str, node_id: int) -> str:
    """The client id a replica fetcher of node `node_id` in fleet `cluster_id` sends."""
    return f"{CLIENT_ID_PREFIX}{node_id}@{cluster_id}"


def is_trusted_replica(request, replica_id: int, *, cluster_id: str,
                       inter_broker_listener: str) -> bool:
    """Whether `request` (a Fetch with this replica id) may act as that replica: on the
    inter-broker listener ("" when the connection was not told its listener: a test's) and
    with that replica's client id."""
    if request.listener and request.listener != inter_broker_listener:
        return False
    return request.header.client_id == replica_client_id(cluster_id, replica_id)
