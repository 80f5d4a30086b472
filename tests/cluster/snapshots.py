"""Fleets written out by hand for cluster/'s pure decisions: a FleetSnapshot of live nodes
(appliances × workers, one rack per appliance) and topics whose partition states a test
gives or that default to each assignment's first replica leading a whole ISR."""

from cluster import znodes
from cluster.fleet_view import FleetSnapshot, TopicState

State = znodes.PartitionState


def snapshot(topics=(), appliances=(1, 2, 3, 4), workers=2, request=None) -> FleetSnapshot:
    brokers = {a * 100 + w: znodes.BrokerRegistration(a * 100 + w, "127.0.0.1", 9000,
                                                      f"rack-{a}")
               for a in appliances for w in range(workers)}
    return FleetSnapshot(brokers=brokers, topics={t.name: t for t in topics},
                         reassign_request=request)


def topic(name="t", replicas=None, adding=None, removing=None, states=None) -> TopicState:
    replicas = replicas or {0: (100, 200, 300), 1: (200, 300, 100), 2: (300, 100, 200)}
    states = states or {p: (State(r[0], 0, r, 1), 0) for p, r in replicas.items()}
    return TopicState(name, replicas, 0, states, {}, adding or {}, removing or {})
