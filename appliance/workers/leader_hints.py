"""KIP-951's leader hints: a NOT_LEADER_OR_FOLLOWER (or FENCED_LEADER_EPOCH) answer that says
where the partition's leader is now, so the client retries there at once instead of first
asking Metadata (librdkafka reads them from Produce v10 and Fetch v12+; klog's client too).

Kafka's rules: the hint is the leader this broker knows (id and epoch; -1 when it knows none
or that one is not live), and Produce v10 lists each hinted leader's endpoint (of the
listener the request came in on) in the top-level `node_endpoints`. Fetch carries endpoints
only from v16, which klog does not serve, so a Fetch hint is the id and epoch alone.
"""

from __future__ import annotations

from klog.protocol.apis import fetch, produce
from klog.protocol.error_codes import ErrorCode

PRODUCE_HINTS_VERSION = 10
FETCH_HINTS_VERSION = 12
_PRODUCE_HINTED = (int(ErrorCode.NOT_LEADER_OR_FOLLOWER),)
_FETCH_HINTED = (int(ErrorCode.NOT_LEADER_OR_FOLLOWER), int(ErrorCode.FENCED_LEADER_EPOCH))


def current_leader(worker, topic: str, index: int, listener: str = ""):
    """(leader node or None, leader epoch) of a partition as this worker knows it."""
    info = worker.control.topic(topic)
    if info is None or not info.has_partition(index):
        return None, -1
    epoch = info.leadership[index].leader_epoch if info.leadership is not None else -1
    return worker.partition_leader(info, index, listener), epoch


def add_to_produce(worker, request, response):
    """The Produce answer with v10's hints on its NOT_LEADER_OR_FOLLOWER partitions."""
    if response is None or request.header.api_version < PRODUCE_HINTS_VERSION:
        return response
    endpoints: dict[int, produce.NodeEndpoint] = {}
    for topic in response.responses:
        for part in topic.partition_responses:
            if part.error_code not in _PRODUCE_HINTED:
                continue
            node, epoch = current_leader(worker, topic.name, part.index, request.listener)
            part.current_leader = produce.LeaderIdAndEpoch(
                leader_id=node.node_id if node is not None else -1, leader_epoch=epoch)
            if node is not None:
                endpoints[node.node_id] = produce.NodeEndpoint(
                    node_id=node.node_id, host=node.host, port=node.port, rack=node.rack)
    response.node_endpoints = [endpoints[n] for n in sorted(endpoints)]
    return response


def add_to_fetch(worker, request, response):
    """The Fetch answer with v12's `current_leader` on its leader-error partitions."""
    if request.header.api_version < FETCH_HINTS_VERSION:
        return response
    for topic in response.responses:
        for part in topic.partitions:
            if part.error_code in _FETCH_HINTED:
                node, epoch = current_leader(worker, topic.topic, part.partition_index,
                                             request.listener)
                part.current_leader = fetch.LeaderIdAndEpoch(
                    leader_id=node.node_id if node is not None else -1, leader_epoch=epoch)
    return response
