"""`klog cluster status`: the fleet as ZooKeeper holds it, from anywhere that reaches ZooKeeper.

Appliances, their live nodes, the controller and its epoch, partitions led per node, each
partition's leader, leader epoch, replicas and ISR, and the partitions that are offline (no
live leader) or under-replicated (fewer live replicas in the ISR than replicas), as Kafka's
UnderReplicatedPartitions counts them. Read-only: one pass over the znodes, no registration,
no watches kept. `--problems` lists only the partitions that are offline or under-replicated.
`klog cluster reassign` is in `klog_cli/cluster_reassign.py`.
"""

from __future__ import annotations

import sys

import orjson
from rich.console import Console
from rich.table import Table

from appliance.config import ConfigError, load_config
from cluster.fleet_view import FleetSnapshot, read_fleet
from cluster.placement import appliance_of
from cluster.session import Session, ZooKeeperUnavailable
from klog_cli import cluster_elect, cluster_reassign
from klog_cli.fleet_security import session_auth


def add_arguments(parser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    status = actions.add_parser("status", help="appliances, nodes, controller, partitions")
    where = status.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", "-c", help="an appliance's config (its zookeeper.connect)")
    where.add_argument("--zookeeper", help="host:port[,host:port...][/chroot]")
    status.add_argument("--json", action="store_true", help="one JSON document")
    status.add_argument("--problems", action="store_true",
                        help="list only offline and under-replicated partitions")
    cluster_elect.add_parser(actions)
    cluster_reassign.add_parser(actions)


def summarize(snapshot: FleetSnapshot) -> dict:
    live = set(snapshot.brokers)
    led: dict[int, int] = {}
    offline, under, partitions = [], [], []
    for name, topic in sorted(snapshot.topics.items()):
        for partition, replicas in sorted(topic.replicas.items()):
            state = topic.states.get(partition)
            leader = state[0].leader if state else -1
            isr = state[0].isr if state else ()
            problems = []
            if leader in live:
                led[leader] = led.get(leader, 0) + 1
            else:
                offline.append(f"{name}-{partition}")
                problems.append("offline")
            if len([r for r in isr if r in live]) < len(replicas):
                under.append(f"{name}-{partition}")
                problems.append("under-replicated")
            partitions.append({"topic": name, "partition": partition, "leader": leader,
                               "leader_epoch": state[0].leader_epoch if state else -1,
                               "replicas": list(replicas), "isr": list(isr),
                               "problems": problems})
    appliances = {}
    for broker_id, registration in sorted(snapshot.appliances.items()):
        nodes = sorted(n for n in live if appliance_of(n) == broker_id)
        appliances[broker_id] = {"rack": registration.rack, "host": registration.host,
                                 "nodes": {n: {"port": snapshot.brokers[n].port,
                                               "leads": led.get(n, 0)} for n in nodes}}
    return {"controller": snapshot.controller, "controller_epoch": snapshot.controller_epoch,
            "appliances": appliances, "topics": len(snapshot.topics),
            "partitions": sum(len(t.replicas) for t in snapshot.topics.values()),
            "offline_partitions": offline, "under_replicated_partitions": under,
            "partition_states": partitions}


def _print_partitions(console, summary: dict, problems_only: bool) -> None:
    """Leader, epoch, replicas and ISR per partition; problems in bold red, and the replicas
    missing from the ISR named."""
    rows = [p for p in summary["partition_states"] if p["problems"] or not problems_only]
    if not rows:
        return
    table = Table("topic", "partition", "leader", "epoch", "replicas", "isr", "status")
    for p in rows:
        missing = [r for r in p["replicas"] if r not in p["isr"]]
        status = ", ".join(p["problems"]) + (f" (not in sync: {_nodes(missing)})"
                                             if missing else "")
        table.add_row(p["topic"], str(p["partition"]),
                      str(p["leader"]) if p["leader"] >= 0 else "none",
                      str(p["leader_epoch"]), _nodes(p["replicas"]), _nodes(p["isr"]),
                      status or "ok", style="bold red" if p["problems"] else None)
    console.print(table)


def _nodes(nodes: list[int]) -> str:
    return ",".join(str(n) for n in nodes)


def _print(summary: dict, problems_only: bool = False) -> None:
    console = Console()
    controller = summary["controller"]
    console.print(f"controller: appliance {controller if controller >= 0 else 'none'}, "
                  f"epoch {summary['controller_epoch']}; {summary['topics']} topic(s), "
                  f"{summary['partitions']} partition(s)")
    table = Table("appliance", "rack", "host", "node", "port", "leads")
    for broker_id, appliance in summary["appliances"].items():
        for node, facts in appliance["nodes"].items() or {"-": {"port": "", "leads": ""}}:
            table.add_row(str(broker_id), appliance["rack"] or "", appliance["host"], str(node),
                          str(facts["port"]), str(facts["leads"]))
    console.print(table)
    _print_partitions(console, summary, problems_only)
    for key in ("offline_partitions", "under_replicated_partitions"):
        names = summary[key]
        console.print(f"{key.replace('_', ' ')}: {len(names)}"
                      + (f" ({', '.join(names[:20])}{' ...' if len(names) > 20 else ''})"
                         if names else ""))


def run(args) -> int:
    if args.action == "elect-leaders":
        return cluster_elect.run(args)
    connect = args.zookeeper
    if args.config:
        try:
            connect = load_config(args.config).zookeeper_connect
        except ConfigError as exc:
            print(f"klog: {exc}", file=sys.stderr)
            return 2
        if not connect:
            print(f"klog: {args.config} has no zookeeper.connect: that appliance runs alone "
                  f"(see klog status)", file=sys.stderr)
            return 2
    if args.action == "reassign":
        return cluster_reassign.run(args, connect)
    session = Session(connect, session_timeout_ms=10_000, connection_timeout_ms=10_000,
                      **session_auth(args))
    try:
        session.start()
        summary = summarize(read_fleet(session, None))
    except ZooKeeperUnavailable as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1
    finally:
        session.stop()
    if args.json:
        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")
    else:
        _print(summary, args.problems)
    return 0
