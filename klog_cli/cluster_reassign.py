"""`klog cluster reassign`: move partitions' replicas between appliances, as
`kafka-reassign-partitions.sh` does against ZooKeeper.

- `--generate --topics-to-move-json-file F (or --topics a,b) --broker-list N,N (or
  --appliances A,A)`: prints the current assignment and a proposed one, both in Kafka's plan
  JSON; nothing is written.
- `--execute --reassignment-json-file F [--throttle BYTES_PER_S]`: checks the plan against
  the fleet, prints the current assignment (to roll back with), sets the throttle, and writes
  the request the controller carries out (`cluster/reassignment.py`).
- `--verify --reassignment-json-file F`: each partition completed, still in progress or
  failed; once all are completed, removes the throttle (unless `--preserve-throttles`).
- `--cancel --reassignment-json-file F`: moves the plan's partitions still in flight back to
  their original replicas (KIP-455), and removes the throttle.

Exit status: 0 done; 1 ZooKeeper unreachable or a request already waiting; 2 bad input (a
malformed or refused plan: nothing was written); 3 from `--verify` while partitions are
still moving (Kafka's tool says 0 either way: scripts can wait on this instead).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cluster import reassign_admin
from cluster.fleet_view import FleetSnapshot, read_fleet
from cluster.reassign_plan import (
    FOLLOWER_RATE,
    LEADER_RATE,
    Plan,
    PlanError,
    check_plan,
    current_plan,
    involved_nodes,
    nodes_of_appliances,
    parse_nodes,
    parse_plan,
    parse_topics,
    progress,
    propose,
    throttle_configs,
)
from cluster.session import Session, ZooKeeperUnavailable
from klog_cli.fleet_security import session_auth

IN_PROGRESS = 3


def _rate(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of bytes per second: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"the throttle must be above 0 B/s, got {value}")
    return value


def add_parser(actions) -> None:
    summary = "move partitions' replicas between appliances (Kafka's reassignment plans)"
    reassign = actions.add_parser("reassign", help=summary, description=summary)
    where = reassign.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", "-c", help="an appliance's config (its zookeeper.connect)")
    where.add_argument("--zookeeper", help="host:port[,host:port...][/chroot]")
    mode = reassign.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generate", action="store_true",
                      help="propose a plan placing the topics on the given nodes")
    mode.add_argument("--execute", action="store_true", help="start the plan's reassignment")
    mode.add_argument("--verify", action="store_true",
                      help="show the plan's progress; remove the throttle once it is done")
    mode.add_argument("--cancel", action="store_true",
                      help="move the plan's partitions still in flight back where they were")
    reassign.add_argument("--reassignment-json-file", metavar="FILE",
                          help='the plan: {"version":1,"partitions":[{"topic","partition",'
                               '"replicas"}]}')
    reassign.add_argument("--topics-to-move-json-file", metavar="FILE",
                          help='--generate: {"version":1,"topics":[{"topic":"t"}]}')
    reassign.add_argument("--topics", help="--generate: topic names, comma-separated")
    reassign.add_argument("--broker-list", metavar="NODES",
                          help="--generate: the node ids to place replicas on")
    reassign.add_argument("--appliances", metavar="IDS",
                          help="--generate: appliances (broker.id) whose live nodes to use")
    reassign.add_argument("--throttle", type=_rate, metavar="BYTES_PER_S",
                          help="--execute: limit the copying of added replicas to this rate "
                               "per node")
    reassign.add_argument("--preserve-throttles", action="store_true",
                          help="--verify, --cancel: leave the throttle in place")


def _usage_error(args) -> str | None:
    if args.generate:
        if bool(args.topics) == bool(args.topics_to_move_json_file):
            return "--generate needs --topics-to-move-json-file or --topics"
        if bool(args.broker_list) == bool(args.appliances):
            return "--generate needs --broker-list or --appliances"
    elif not args.reassignment_json_file:
        return "--execute, --verify and --cancel need --reassignment-json-file"
    if args.throttle is not None and not args.execute:
        return "--throttle goes with --execute"
    return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"cannot read {path}: {exc}") from None


def run(args, connect: str) -> int:
    problem = _usage_error(args)
    if problem:
        print(f"klog: {problem}", file=sys.stderr)
        return 2
    try:
        plan = parse_plan(_read(args.reassignment_json_file)) \
            if args.reassignment_json_file and not args.generate else None
        topics = (parse_topics(_read(args.topics_to_move_json_file))
                  if args.topics_to_move_json_file else
                  [t.strip() for t in (args.topics or "").split(",") if t.strip()])
    except PlanError as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 2
    session = Session(connect, session_timeout_ms=10_000, connection_timeout_ms=10_000,
                      **session_auth(args))
    try:
        session.start()
        snapshot = read_fleet(session, None)
        if args.generate:
            return _generate(args, snapshot, topics)
        if args.execute:
            return _execute(args, session, snapshot, plan)
        if args.verify:
            return _verify(args, session, snapshot, plan)
        return _cancel(args, session, snapshot, plan)
    except PlanError as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 2
    except (ZooKeeperUnavailable, reassign_admin.RequestPending) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1
    finally:
        session.stop()


def _generate(args, snapshot: FleetSnapshot, topics: list[str]) -> int:
    if args.broker_list:
        nodes = parse_nodes(args.broker_list)
    else:
        nodes = nodes_of_appliances(snapshot, parse_nodes(args.appliances, "--appliances"))
    proposed = propose(snapshot, topics, nodes)
    current = current_plan(snapshot, [(t, p) for t, p, _ in proposed.partitions])
    print(f"Current partition replica assignment\n{current.to_json()}\n")
    print(f"Proposed partition reassignment configuration\n{proposed.to_json()}")
    return 0


def _names(keys) -> str:
    return ",".join(f"{t}-{p}" for t, p in keys)


def _execute(args, session: Session, snapshot: FleetSnapshot, plan: Plan) -> int:
    check_plan(plan, snapshot)
    if snapshot.reassign_request is not None:
        raise reassign_admin.RequestPending(
            "a reassignment request still waits for the controller to take it up; retry "
            "once it has (is a controller elected? see klog cluster status)")
    current = current_plan(snapshot, [(t, p) for t, p, _ in plan.partitions])
    print(f"Current partition replica assignment\n\n{current.to_json()}\n\n"
          f"Save this to use as the --reassignment-json-file option during rollback")
    if args.throttle is not None:
        reassign_admin.set_throttles(session, throttle_configs(plan, snapshot),
                                     involved_nodes(plan, snapshot), args.throttle)
        print("Warning: You must run --verify periodically, until the reassignment "
              "completes, to ensure the throttle is removed.")
        print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
    reassign_admin.submit(session, plan)
    print(f"Successfully started partition reassignments for "
          f"{_names((t, p) for t, p, _ in plan.partitions)}")
    return 0


def _verify(args, session: Session, snapshot: FleetSnapshot, plan: Plan) -> int:
    found = progress(plan, snapshot)
    print("Status of partition reassignment:")
    for (topic, partition), state in found.items():
        name = f"{topic}-{partition}"
        if state.state == "completed":
            print(f"Reassignment of partition {name} is completed.")
        elif state.state == "in progress":
            print(f"Reassignment of partition {name} is still in progress"
                  + (f" ({state.detail})." if state.detail else "."))
        else:
            print(f"Reassignment of partition {name} failed: {state.detail}.")
    if any(s.state == "in progress" for s in found.values()):
        return IN_PROGRESS
    if not args.preserve_throttles:
        _clear_throttles(session, snapshot, plan)
    return 0


def _clear_throttles(session: Session, snapshot: FleetSnapshot, plan: Plan) -> None:
    """Kafka's tool clears the rates of every broker: here every live node that has one, and
    the plan's nodes (a node that is down keeps its rate until a later --verify)."""
    throttled = {n for n, c in snapshot.broker_configs.items()
                 if LEADER_RATE in c or FOLLOWER_RATE in c}
    throttled |= {n for _, _, replicas in plan.partitions for n in replicas}
    nodes, topics = reassign_admin.clear_throttles(session, plan.topics, throttled)
    if nodes:
        print(f"Clearing broker-level throttles on brokers {','.join(map(str, nodes))}")
    for topic in topics:
        print(f"Clearing topic-level throttles on topic {topic}")


def _cancel(args, session: Session, snapshot: FleetSnapshot, plan: Plan) -> int:
    found = progress(plan, snapshot)
    waiting = [k for k, s in found.items() if s.detail.startswith("waiting for the controller")]
    if waiting:
        raise reassign_admin.RequestPending(
            f"{_names(waiting)} still wait for the controller to take the request up; "
            f"retry once it has")
    moving = [(t, p) for t, p, _ in plan.partitions if found[(t, p)].state == "in progress"]
    if moving:
        reassign_admin.submit(session, current_plan(snapshot, moving))
        print(f"Successfully cancelled partition reassignments for: {_names(moving)}")
    else:
        print("None of the specified partition reassignments are active.")
    if not args.preserve_throttles:
        _clear_throttles(session, snapshot, plan)
    return 0
