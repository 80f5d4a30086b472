"""Metadata: every worker of the appliance as its own broker, and the topics it knows.

Brokers are answered at their endpoints of the listener the request came in on (Kafka does
this), so a client of the SASL_SSL listener is never sent to a PLAINTEXT port.

Asked for (v8+), each topic's and the cluster's authorized operations are answered as Kafka
does (`access.authorized_operations`).

`topics = null` asks for every topic; a named topic that does not exist is created when both
the request (v4+: allow_auto_topic_creation; always before v4) and the broker config allow it.
"""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import metadata
from klog.protocol.error_codes import ErrorCode

API_KEY = metadata.SPEC.key


def _partitions(worker, info, listener: str, live: set[int], alone: dict) -> list:
    """Each partition's leader, replicas and ISR: the owner worker when the appliance runs
    alone, the controller's state in cluster mode (a leader that is not live is offline, and
    so is one without an endpoint on the request's listener, as Kafka answers). ``alone``:
    owner worker -> (leader id, node id), filled once per request (issue 26: 10,000
    partitions asked the same few workers' state 10,000 times)."""
    result = []
    make = metadata.MetadataResponsePartition
    for index, owner in enumerate(info.owners):
        if info.leadership is None:
            known = alone.get(owner)
            if known is None:
                leader_node = worker.partition_leader(info, index, listener)
                known = alone[owner] = (leader_node.node_id if leader_node is not None
                                        else -1, worker.node_id_of(owner))
            leader, node = known
            replicas, isr, epoch = [node], [node], -1
        else:
            leader_node = worker.partition_leader(info, index, listener)
            leader = leader_node.node_id if leader_node is not None else -1
            state = info.leadership[index]
            replicas, isr, epoch = list(state.replicas), list(state.isr), state.leader_epoch
        result.append(make(
            error_code=0 if leader >= 0 else int(ErrorCode.LEADER_NOT_AVAILABLE),
            partition_index=index, leader_id=leader, leader_epoch=epoch, replica_nodes=replicas,
            isr_nodes=[r for r in isr if r in live],
            offline_replicas=[r for r in replicas if r not in live]))
    return result


def _listed_nodes(worker, listener: str) -> list:
    """The live nodes, and those that left within the grace (appliance.control.departed_nodes:
    librdkafka moves a partition off a dead leader at once only while that node is listed)."""
    live = worker.nodes(listener)
    departed = getattr(worker.control, "departed_nodes", None)
    if departed is None or worker.control.fleet_nodes is None:
        return live
    listed = {n.node_id for n in live}
    lately = (n.on(listener) for n in departed.within(worker.config.departed_broker_grace_ms
                                                      / 1000))
    return live + sorted((n for n in lately if n is not None and n.node_id not in listed),
                         key=lambda n: n.node_id)


# (worker, topic, listener) -> (info, listener, live, fleet nodes, answer): a topic is answered the
# same way while its TopicInfo (replaced on every change), the serving nodes and, in a fleet,
# the nodes' endpoints (`fleet_nodes`, replaced on every change) stay the same. Building
# 10,000 partition answers took ~40 ms of a Metadata of all on an appliance alone, and in a
# fleet of three during a controller's failover, the survivors' workers spent over half their
# CPU rebuilding the same answers for clients that polled Metadata (issue 26). An answer with
# authorized operations depends on the principal and is never kept.
_ANSWERS: dict[tuple[int, str], tuple] = {}


def _topic(worker, request, info, live: set[int] | None = None,
           alone: dict | None = None) -> object:
    listener = request.listener
    if live is None:
        live = {node.node_id for node in worker.nodes()}
    if getattr(request.body, "include_topic_authorized_operations", False):
        operations = access.authorized_operations(worker, request, access.TOPIC, info.name)
        return _build_topic(worker, info, listener, live, alone, operations)
    fleet_nodes = getattr(worker.control, "fleet_nodes", None)  # None: an appliance alone
    key = (id(worker), info.name, listener)
    cached = _ANSWERS.get(key)
    if cached is not None and cached[0] is info and cached[2] == live and \
            cached[3] is fleet_nodes:
        return cached[4]
    answer = _build_topic(worker, info, listener, live, alone)
    if len(_ANSWERS) > 4 * len(worker.control.topics()) + 64:
        _ANSWERS.clear()  # deleted topics' answers (a topic has one per listener asked on)
    _ANSWERS[key] = (info, listener, frozenset(live), fleet_nodes, answer)
    return answer


def _build_topic(worker, info, listener: str, live: set[int], alone: dict | None,
                 operations: int = access.NOT_ASKED) -> object:
    return metadata.MetadataResponseTopic(
        error_code=0, name=info.name, is_internal=info.internal,
        partitions=_partitions(worker, info, listener, live, {} if alone is None else alone),
        topic_authorized_operations=operations)


def handle(worker: HandlerContext, request):
    body = request.body
    version = request.header.api_version
    allow_create = worker.config.auto_create_topics_enable and (
        version < 4 or body.allow_auto_topic_creation)
    topics = []
    if body.topics is None:  # every topic the principal may describe
        infos = worker.control.topics()
        hidden = access.refused_topics(worker, request, Operation.DESCRIBE,
                                       [i.name for i in infos])
        live, alone = {node.node_id for node in worker.nodes()}, {}
        topics = [_topic(worker, request, info, live, alone) for info in infos
                  if info.name not in hidden]
    else:
        hidden = access.refused_topics(worker, request, Operation.DESCRIBE,
                                       [t.name for t in body.topics])
        for requested in body.topics:
            name = requested.name
            info = worker.control.topic(name)
            if name in hidden or info is None and allow_create and \
                    not access.may_create_topic(worker, request, name):
                topics.append(metadata.MetadataResponseTopic(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, partitions=[]))
                continue
            if info is None and allow_create:
                result = worker.control.create_topic(name)
                if result.error in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                    info = worker.control.topic(name)
                else:
                    topics.append(metadata.MetadataResponseTopic(
                        error_code=result.error, name=name, partitions=[]))
                    continue
            if info is None:
                topics.append(metadata.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, partitions=[]))
            else:
                topics.append(_topic(worker, request, info))
    brokers = [metadata.MetadataResponseBroker(node_id=n.node_id, host=n.host, port=n.port,
                                               rack=n.rack)
               for n in _listed_nodes(worker, request.listener)]  # the listener it came in on
    return metadata.Response(
        throttle_time_ms=0, brokers=brokers, cluster_id=worker.cluster_id,
        controller_id=worker.controller_node_id, topics=topics,
        cluster_authorized_operations=access.cluster_operations(worker, request)
        if getattr(body, "include_cluster_authorized_operations", False) else access.NOT_ASKED)
