"""What `klog cluster reassign` writes to ZooKeeper, as Kafka's tool wrote it: the request and the
throttle. Nothing here decides (`reassign_plan` does); every write is one znode, conditional
on the version read, so two commands at once re-read instead of overwriting each other.

- `submit`: creates `/admin/reassign_partitions` for the controller to take up. Only one
  request waits at a time: a second one is refused (`RequestPending`) until the controller
  has taken the first up, as Kafka refused it.
- `set_throttles`: each topic's throttled replicas (`/config/topics/<t>`) and each node's
  rates (`/config/brokers/<node>`, created when missing), Kafka's keys and JSON.
- `clear_throttles`: removes them again (`--verify` once all is done, `--cancel`).

Raises ZooKeeperUnavailable when ZooKeeper cannot answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from cluster import znodes
from cluster.reassign_plan import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    Plan,
)
from cluster.session import BadVersionError, NodeExistsError, NoNodeError, Session

ATTEMPTS = 10


class RequestPending(RuntimeError):
    """A reassignment request still waits for the controller."""


def submit(session: Session, plan: Plan) -> None:
    request = znodes.ReassignmentRequest(plan.partitions)
    try:
        session.call("create", znodes.REASSIGN_PARTITIONS, request.encode(), makepath=True)
    except NodeExistsError:
        raise RequestPending(
            f"a reassignment request still waits at {znodes.REASSIGN_PARTITIONS} for the "
            f"controller to take it up; retry once it has (is a controller elected? see "
            f"klog cluster status)") from None


def set_throttles(session: Session, topic_configs: dict[str, dict[str, str]],
                  nodes: Iterable[int], rate: int) -> None:
    for name, configs in sorted(topic_configs.items()):
        _change(session, znodes.topic_config_path(name), lambda c, new=configs: {**c, **new},
                create=False)
    rates = {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)}
    for node in sorted(set(nodes)):
        _change(session, znodes.broker_config_path(node), lambda c: {**c, **rates},
                create=True)


def clear_throttles(session: Session, topics: Iterable[str],
                    nodes: Iterable[int]) -> tuple[list[int], list[str]]:
    """Remove the rates of `nodes` and the throttled replicas of `topics`; returns the nodes
    and topics that had them."""
    def without(keys):
        return lambda c: {k: v for k, v in c.items() if k not in keys}
    cleared_nodes = [node for node in sorted(set(nodes))
                     if _change(session, znodes.broker_config_path(node),
                                without((LEADER_RATE, FOLLOWER_RATE)), create=False)]
    cleared_topics = [name for name in sorted(set(topics))
                      if _change(session, znodes.topic_config_path(name),
                                 without((LEADER_REPLICAS, FOLLOWER_REPLICAS)), create=False)]
    return cleared_nodes, cleared_topics


def _change(session: Session, path: str, change: Callable[[dict], dict], *,
            create: bool) -> bool:
    """Rewrite the config at `path` as `change` makes it; True if it changed."""
    for _ in range(ATTEMPTS):
        try:
            data, stat = session.call("get", path)
        except NoNodeError:
            if not create:
                return False
            try:
                session.call("create", path, znodes.TopicConfig(change({})).encode(),
                             makepath=True)
                return True
            except NodeExistsError:
                continue
        old = znodes.TopicConfig.decode(data, path).config
        new = change(old)
        if new == old:
            return False
        try:
            session.call("set", path, znodes.TopicConfig(new).encode(), version=stat.version)
            return True
        except BadVersionError:
            continue  # changed meanwhile: apply the change to what it is now
        except NoNodeError:
            return False
    raise RuntimeError(f"{path} kept changing; retry")
