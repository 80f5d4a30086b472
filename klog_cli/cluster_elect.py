"""`klog cluster elect-leaders`: move leadership back to the preferred replicas now.

Kafka's `kafka-leader-election.sh --election-type preferred` (ZooKeeper mode: the request
znode `/admin/preferred_replica_election`, carried out by the fleet's controller;
`cluster/preferred.py`). It names all partitions (`--all-topic-partitions`), a topic's, or
one partition, waits until the controller has acted, and reports each partition as Kafka's
tool does: elected, already led by its preferred replica, or not electable (the preferred
replica is not live, shutting down, or out of the ISR). Exit 1 if any partition could not be
elected, or the controller did not act in time; 2 for bad arguments.
"""

from __future__ import annotations

import sys
import time

import orjson

from appliance.config import ConfigError, load_config
from cluster import znodes
from cluster.fleet_view import FleetSnapshot, read_fleet
from cluster.leadership import nodes_of, why_not_preferred
from cluster.preferred import ElectionInProgress, request_election
from cluster.session import Session, ZooKeeperUnavailable
from klog_cli.fleet_security import session_auth

POLL_S = 0.2


class UsageError(ValueError):
    """The partitions asked for do not exist."""


def add_parser(actions) -> None:
    elect = actions.add_parser("elect-leaders", help="move leadership to preferred replicas "
                               "(Kafka's kafka-leader-election.sh)")
    where = elect.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", "-c", help="an appliance's config (its zookeeper.connect)")
    where.add_argument("--zookeeper", help="host:port[,host:port...][/chroot]")
    elect.add_argument("--election-type", choices=("preferred",), default="preferred",
                       help="only preferred: unclean election is a topic config")
    which = elect.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true",
                       help="every partition of every topic")
    which.add_argument("--topic", help="this topic's partitions (all, or --partition)")
    elect.add_argument("--partition", type=int, help="with --topic: this partition only")
    elect.add_argument("--timeout-ms", type=int, default=30_000,
                       help="how long to wait for the controller (default 30000)")
    elect.add_argument("--json", action="store_true", help="one JSON document")


def chosen(snapshot: FleetSnapshot, args) -> list[tuple[str, int]]:
    """The partitions the arguments name; UsageError for a topic or partition not there."""
    topics = {n: t for n, t in snapshot.topics.items() if n not in snapshot.deleting}
    if args.all_topic_partitions:
        return [(n, p) for n, t in sorted(topics.items()) for p in sorted(t.replicas)]
    topic = topics.get(args.topic)
    if topic is None:
        raise UsageError(f"topic {args.topic!r} does not exist")
    if args.partition is None:
        return [(args.topic, p) for p in sorted(topic.replicas)]
    if args.partition not in topic.replicas:
        raise UsageError(f"topic {args.topic!r} has no partition {args.partition} "
                         f"(partitions 0-{len(topic.replicas) - 1})")
    return [(args.topic, args.partition)]


def outcomes(before: FleetSnapshot, after: FleetSnapshot,
             partitions: list[tuple[str, int]]) -> dict:
    """Per partition, as Kafka's tool reports: elected now, already elected, or why not."""
    live = set(after.brokers)
    shutting = nodes_of(after.shutting_down, live)
    report = {"elected": [], "already": [], "failed": {}}
    for name, partition in partitions:
        key = f"{name}-{partition}"
        topic = after.topics.get(name)
        state = topic.states.get(partition) if topic is not None else None
        if state is None:
            report["failed"][key] = "the partition no longer exists"
            continue
        replicas = topic.replicas[partition]
        earlier = before.topics[name].states.get(partition)
        if state[0].leader == replicas[0]:
            was = earlier is not None and earlier[0].leader == replicas[0]
            report["already" if was else "elected"].append(key)
        else:
            report["failed"][key] = why_not_preferred(state[0], replicas, live=live,
                                                      shutting=shutting)
    return report


def _connect(args) -> str:
    if not args.config:
        return args.zookeeper
    connect = load_config(args.config).zookeeper_connect
    if not connect:
        raise ConfigError(f"{args.config} has no zookeeper.connect: that appliance runs "
                          f"alone, with no leaders to elect")
    return connect


def _elect(session: Session, args) -> dict:
    before = read_fleet(session, None)
    partitions = chosen(before, args)
    request_election(session, partitions)
    deadline = time.monotonic() + args.timeout_ms / 1000
    while session.call("exists", znodes.PREFERRED_REPLICA_ELECTION) is not None:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the controller did not carry out the election within {args.timeout_ms} ms "
                f"(is a controller elected?); the request stays at "
                f"{znodes.PREFERRED_REPLICA_ELECTION} and runs when one is")
        time.sleep(POLL_S)
    return outcomes(before, read_fleet(session, None), partitions)


def _print(report: dict) -> None:
    if report["elected"]:
        print("Successfully completed leader election (PREFERRED) for partitions "
              + ", ".join(report["elected"]))
    if report["already"]:
        print("Valid replica already elected for partitions " + ", ".join(report["already"]))
    for key, why in report["failed"].items():
        print(f"Error completing leader election (PREFERRED) for partition: {key}: "
              f"PREFERRED_LEADER_NOT_AVAILABLE: {why}")


def run(args) -> int:
    if args.partition is not None and args.topic is None:
        print("klog: --partition needs --topic", file=sys.stderr)
        return 2
    try:
        connect = _connect(args)
    except ConfigError as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 2
    session = Session(connect, session_timeout_ms=10_000, connection_timeout_ms=10_000,
                      **session_auth(args))
    try:
        session.start()
        report = _elect(session, args)
    except UsageError as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 2
    except (ZooKeeperUnavailable, ElectionInProgress, TimeoutError) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1
    finally:
        session.stop()
    if args.json:
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
    else:
        _print(report)
    return 1 if report["failed"] else 0
