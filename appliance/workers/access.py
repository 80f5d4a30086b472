"""The handlers' one question to the authorizer: may this request's principal, from its host,
do `operation` on this resource?

Without `authorizer.class.name` the answer is yes at the cost of one attribute test, so the
path of an appliance without ACLs is as before. With it, the decision is
`appliance.security.authorizer.authorize` over the ACLs the supervisor last broadcast.
Each handler asks where it reads its request and answers Kafka's error for what it refuses.
"""

from __future__ import annotations

from appliance.security.acls import CLUSTER_NAME, SUPPORTED_OPERATIONS, Operation, ResourceType
from appliance.security.authorizer import authorize

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
NOT_ASKED = -(2**31)  # the schemas' default for authorized operations: not asked for


def allowed(worker, request, operation: Operation, resource_type: ResourceType,
            name: str = CLUSTER_NAME) -> bool:
    settings = worker.authorizer
    if settings is None:
        return True
    return authorize(worker.control.acls, settings, request.principal,
                     request.client_host.lstrip("/"), operation, resource_type, name)


def on_topic(worker, request, operation: Operation, topic: str) -> bool:
    return allowed(worker, request, operation, TOPIC, topic)


def on_group(worker, request, operation: Operation, group: str) -> bool:
    return allowed(worker, request, operation, GROUP, group)


def on_cluster(worker, request, operation: Operation) -> bool:
    return allowed(worker, request, operation, CLUSTER, CLUSTER_NAME)


def may_create_topic(worker, request, topic: str) -> bool:
    """CREATE on the cluster or on the topic (Kafka's rule for CreateTopics and for a topic
    created by Metadata or Produce)."""
    return (on_cluster(worker, request, Operation.CREATE)
            or on_topic(worker, request, Operation.CREATE, topic))


def refused_topics(worker, request, operation: Operation, names) -> frozenset[str]:
    """The topics among `names` the request may not `operation`: none without an authorizer
    (one test), each name decided once however many partitions it lists."""
    if worker.authorizer is None:
        return frozenset()
    return frozenset(n for n in set(names) if not on_topic(worker, request, operation, n))


def on_transactional_id(worker, request, operation: Operation, transactional_id: str) -> bool:
    return allowed(worker, request, operation, ResourceType.TRANSACTIONAL_ID, transactional_id)


def authorized_operations(worker, request, resource_type: ResourceType,
                          name: str = CLUSTER_NAME) -> int:
    """The bit field (1 << operation) of the operations on the resource the principal may do,
    from those Kafka supports on its type (AuthHelper.authorizedOperations): every one of them
    without an authorizer. Metadata, DescribeCluster and DescribeGroups answer it when asked."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if allowed(worker, request, operation, resource_type, name):
            bits |= 1 << int(operation)
    return bits


def cluster_operations(worker, request) -> int:
    """The cluster's authorized operations, 0 without DESCRIBE on the cluster (Kafka's rule
    in Metadata and DescribeCluster)."""
    if not on_cluster(worker, request, Operation.DESCRIBE):
        return 0
    return authorized_operations(worker, request, CLUSTER)
