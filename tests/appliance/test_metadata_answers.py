"""Metadata reuses a topic's answer in a fleet too (issue 26: during a controller's failover
the survivors' workers spent over half their CPU rebuilding 10,000 partition answers for
clients polling Metadata). The answer must still follow every change it depends on: the
topic's states, the live nodes and their endpoints, the listener asked on.

The worker here is a stand-in with the real `Worker.nodes` and `Worker.partition_leader`, a
control plane holding what a fleet's supervisor sent, and no authorizer."""

from __future__ import annotations

from types import SimpleNamespace

from appliance.control.topics import FleetNode, PartitionLeadership, TopicInfo
from appliance.workers.handlers import metadata as handler
from appliance.workers.worker import Worker
from klog.protocol.apis import metadata
from klog.protocol.error_codes import ErrorCode


class FleetWorker:
    nodes = Worker.nodes
    partition_leader = Worker.partition_leader

    def __init__(self, topics: list[TopicInfo], nodes: dict[int, FleetNode]):
        self.config = SimpleNamespace(auto_create_topics_enable=False,
                                      departed_broker_grace_ms=0)
        self.control = SimpleNamespace(topics=lambda: list(self.catalog.values()),
                                       topic=lambda name: self.catalog.get(name),
                                       fleet_nodes=nodes, fleet_controller_id=100,
                                       departed_nodes=None)
        self.catalog = {t.name: t for t in topics}
        self.authorizer = None
        self.cluster_id = "fleet"
        self.controller_node_id = 100


def node(node_id: int, *listeners: str) -> FleetNode:
    port = 9000 + node_id
    return FleetNode(node_id, "127.0.0.1", port, None,
                     tuple((name, "127.0.0.1", port + i) for i, name in enumerate(listeners)))


NODES = {n: node(n, "PLAINTEXT", "SASL") for n in (100, 200, 300)}


def topic(leaders: list[int], isr=(100, 200, 300)) -> TopicInfo:
    return TopicInfo("t", owners=(-1,) * len(leaders), leadership=tuple(
        PartitionLeadership(leader, 1, (100, 200, 300), tuple(isr)) for leader in leaders))


def ask(worker, listener: str = "PLAINTEXT"):
    request = SimpleNamespace(
        body=metadata.Request(topics=None, allow_auto_topic_creation=False,
                              include_cluster_authorized_operations=False,
                              include_topic_authorized_operations=False),
        header=SimpleNamespace(api_version=8), listener=listener)
    (answer,) = handler.handle(worker, request).topics
    return answer


def test_an_unchanged_topic_is_answered_with_the_answer_built_before():
    worker = FleetWorker([topic([100, 200, 300])], dict(NODES))
    first = ask(worker)
    assert [p.leader_id for p in first.partitions] == [100, 200, 300]
    assert ask(worker) is first


def test_a_node_gone_shows_at_once_though_the_topic_did_not_change():
    worker = FleetWorker([topic([100, 200, 300])], dict(NODES))
    ask(worker)
    worker.control.fleet_nodes = {n: v for n, v in NODES.items() if n != 200}  # as _on_fleet
    gone = ask(worker)
    assert [p.leader_id for p in gone.partitions] == [100, -1, 300]
    assert gone.partitions[1].error_code == ErrorCode.LEADER_NOT_AVAILABLE
    assert all(p.offline_replicas == [200] and 200 not in p.isr_nodes
               for p in gone.partitions)


def test_a_new_state_of_the_topic_is_answered():
    worker = FleetWorker([topic([100, 200, 300])], dict(NODES))
    ask(worker)
    worker.catalog["t"] = topic([100, 300, 300], isr=(100, 300))  # as a TopicChanged
    moved = ask(worker)
    assert [p.leader_id for p in moved.partitions] == [100, 300, 300]
    assert all(p.isr_nodes == [100, 300] for p in moved.partitions)


def test_each_listener_gets_its_own_answer():
    nodes = dict(NODES)
    nodes[300] = node(300, "PLAINTEXT")  # no SASL endpoint: offline on that listener
    worker = FleetWorker([topic([100, 200, 300])], nodes)
    plain = ask(worker, "PLAINTEXT")
    sasl = ask(worker, "SASL")
    assert [p.leader_id for p in plain.partitions] == [100, 200, 300]
    assert [p.leader_id for p in sasl.partitions] == [100, 200, -1]
    assert ask(worker, "PLAINTEXT") is plain and ask(worker, "SASL") is sasl
