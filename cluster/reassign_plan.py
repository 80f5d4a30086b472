"""Reassignment plans in Kafka's JSON, and every decision `klog cluster reassign` makes: pure.

The format is `kafka-reassign-partitions.sh`'s:
`{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[101,201,301]}]}`, node ids
as replicas (a node is one worker, one disk: node id = broker.id * 100 + worker index). An
entry may carry Kafka's `log_dirs`, but only as `"any"` for each replica: a node has one log
dir. Topics to move come as Kafka's `{"version":1,"topics":[{"topic":"t"}]}`.

Everything here takes a `FleetSnapshot` and returns plain data or raises `PlanError` naming
what is wrong, so a bad plan is refused before anything is written to ZooKeeper:

- `parse_plan`, `parse_topics`, `parse_nodes`: the files and lists as given;
- `check_plan`: the plan against the fleet (`reassignment.refusal`'s rules, plus internal
  topics, which the fleet places itself);
- `propose`: `--generate`, the topics placed on the given nodes as a new topic is placed
  (`placement.place_replicas`: distinct appliances and racks, the least-loaded disk, leaders
  rotating), keeping a replica on the disk that holds it when its appliance keeps one;
- `progress`: `--verify`, each partition completed, in progress or failed;
- `throttle_configs`: `--throttle`, the throttled replicas of each topic in Kafka's config.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from cluster.fleet_view import FleetSnapshot, TopicState
from cluster.placement import LiveNode, PlacementError, appliance_of, place_replicas
from cluster.reassignment import Move, refusal

INTERNAL_PREFIX = "__"
# Kafka's names: node configs (/config/brokers/<node>) and topic configs (/config/topics/<t>)
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

Entry = tuple[str, int, tuple[int, ...]]  # topic, partition, target replicas


class PlanError(ValueError):
    """A plan, a topic list or a node list that cannot be used; the message says why."""


@dataclass(frozen=True)
class Plan:
    partitions: tuple[Entry, ...]

    def to_json(self) -> str:
        return orjson.dumps({"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
            for t, p, r in self.partitions]}).decode()

    @property
    def topics(self) -> list[str]:
        return sorted({t for t, _, _ in self.partitions})


@dataclass(frozen=True)
class Progress:
    state: str  # "completed", "in progress" or "failed"
    detail: str = ""


# parsing ------------------------------------------------------------------------------------

def _object(text: str, what: str) -> dict:
    try:
        raw = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise PlanError(f"{what} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise PlanError(f"{what} must be a JSON object, not {type(raw).__name__}")
    if raw.get("version", 1) != 1:
        raise PlanError(f"{what}: version {raw['version']!r} is not supported (only 1)")
    return raw


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_plan(text: str) -> Plan:
    """A reassignment plan; PlanError naming the first entry that is malformed."""
    raw = _object(text, "the reassignment plan")
    entries = raw.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise PlanError('the reassignment plan has no "partitions" list of entries')
    out: list[Entry] = []
    seen = set()
    for number, entry in enumerate(entries):
        where = f"entry {number} of the plan"
        if not isinstance(entry, dict):
            raise PlanError(f"{where} is not an object")
        topic, partition, replicas = (entry.get("topic"), entry.get("partition"),
                                      entry.get("replicas"))
        if not isinstance(topic, str) or not topic:
            raise PlanError(f'{where} has no "topic" name')
        if not _is_int(partition) or partition < 0:
            raise PlanError(f'{where} ({topic}): "partition" must be an integer >= 0')
        if not isinstance(replicas, list) or not all(_is_int(r) for r in replicas):
            raise PlanError(f'{where} ({topic}-{partition}): "replicas" must be a list of '
                            f'node ids')
        log_dirs = entry.get("log_dirs", ["any"] * len(replicas))
        if not isinstance(log_dirs, list) or any(d != "any" for d in log_dirs):
            raise PlanError(f'{where} ({topic}-{partition}): "log_dirs" other than "any" are '
                            f'not supported: a node is one log dir')
        if (topic, partition) in seen:
            raise PlanError(f"{topic}-{partition} is listed more than once in the plan")
        seen.add((topic, partition))
        out.append((topic, partition, tuple(replicas)))
    return Plan(tuple(out))


def parse_topics(text: str) -> list[str]:
    """Kafka's topics-to-move JSON: `{"version":1,"topics":[{"topic":"t"}]}`."""
    raw = _object(text, "the topics-to-move file")
    entries = raw.get("topics")
    if not isinstance(entries, list) or not entries:
        raise PlanError('the topics-to-move file has no "topics" list')
    names = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise PlanError(f'the topics-to-move file: {entry!r} is not {{"topic": name}}')
        names.append(entry["topic"])
    return list(dict.fromkeys(names))


def parse_nodes(text: str, what: str = "--broker-list") -> tuple[int, ...]:
    """A comma-separated list of ids, each once."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items or not all(item.isdigit() for item in items):
        raise PlanError(f"{what} must be a comma-separated list of ids, got {text!r}")
    ids = tuple(int(item) for item in items)
    if len(set(ids)) != len(ids):
        raise PlanError(f"{what} lists an id more than once: {text!r}")
    return ids


def nodes_of_appliances(snapshot: FleetSnapshot, appliances: tuple[int, ...]) -> tuple[int, ...]:
    """The live nodes of the given appliances (broker.ids); PlanError for one with none."""
    empty = [a for a in appliances if not any(appliance_of(n) == a for n in snapshot.brokers)]
    if empty:
        raise PlanError(f"appliance(s) {empty} have no live node in the fleet (live "
                        f"appliances: {sorted({appliance_of(n) for n in snapshot.brokers})})")
    return tuple(sorted(n for n in snapshot.brokers if appliance_of(n) in appliances))


# checks -------------------------------------------------------------------------------------

def _check_topic(snapshot: FleetSnapshot, name: str) -> str | None:
    if name.startswith(INTERNAL_PREFIX):
        return f"{name} is an internal topic, placed by the fleet itself: it cannot be moved"
    if name not in snapshot.topics or name in snapshot.deleting:
        return f"topic {name!r} does not exist"
    return None


def check_plan(plan: Plan, snapshot: FleetSnapshot) -> None:
    """PlanError listing every entry the fleet would refuse, one per line."""
    live = set(snapshot.brokers)
    problems = []
    for name, partition, replicas in plan.partitions:
        problem = _check_topic(snapshot, name)
        if problem is None:
            problem = refusal(snapshot.topics[name], partition, replicas, live)
        if problem is not None:
            problems.append(problem)
    if problems:
        raise PlanError("the plan is refused, nothing was written:\n  " + "\n  ".join(problems))


# --generate and the current assignment ------------------------------------------------------

def _moves(topic: TopicState) -> dict[int, Move]:
    return {p: Move(r, topic.adding.get(p, ()), topic.removing.get(p, ()))
            for p, r in sorted(topic.replicas.items())}


def current_plan(snapshot: FleetSnapshot, keys) -> Plan:
    """The replicas of the partitions `keys` ((topic, partition)) as they are, or as they
    were before a move in flight: what a rollback would ask for."""
    out = []
    for name, partition in keys:
        topic = snapshot.topics.get(name)
        if topic is not None and partition in topic.replicas:
            out.append((name, partition, _moves(topic)[partition].original))
    return Plan(tuple(out))


def propose(snapshot: FleetSnapshot, topics: list[str], nodes: tuple[int, ...]) -> Plan:
    """`topics` placed on `nodes` as placement.py places a new topic; PlanError if a topic
    or a node is unknown, or the nodes span fewer appliances than the replication factor."""
    problems = [p for p in (_check_topic(snapshot, name) for name in topics) if p]
    unknown = [n for n in nodes if n not in snapshot.brokers]
    if unknown:
        problems.append(f"node(s) {unknown} are not live nodes of the fleet (live: "
                        f"{sorted(snapshot.brokers)})")
    if problems:
        raise PlanError("\n".join(problems))
    live = [LiveNode(n, snapshot.brokers[n].rack) for n in nodes]
    load: dict[int, int] = {}
    for name, topic in snapshot.topics.items():
        if name not in topics:
            for move in _moves(topic).values():
                for node in move.target:
                    load[node] = load.get(node, 0) + 1
    out: list[Entry] = []
    for name in topics:
        originals = {p: m.original for p, m in _moves(snapshot.topics[name]).items()}
        replication_factor = len(originals[min(originals)])
        try:
            placed = place_replicas(sorted(originals), replication_factor, live, load)
        except PlacementError as exc:
            raise PlanError(f"{name}: {exc}") from None
        for partition, replicas in sorted(placed.items()):
            kept = keep_disks(replicas, originals[partition])
            for node in kept:
                load[node] = load.get(node, 0) + 1
            out.append((name, partition, kept))
    return Plan(tuple(out))


def keep_disks(proposed: tuple[int, ...], current: tuple[int, ...]) -> tuple[int, ...]:
    """Where `proposed` puts a replica on an appliance that holds one now on another disk,
    the disk that holds it: moving a replica between an appliance's disks is not supported."""
    held = {appliance_of(n): n for n in current}
    return tuple(held.get(appliance_of(n), n) for n in proposed)


# --verify -----------------------------------------------------------------------------------

def progress(plan: Plan, snapshot: FleetSnapshot) -> dict[tuple[str, int], Progress]:
    """How far each partition of the plan has come."""
    request = snapshot.reassign_request
    pending = {(t, p) for t, p, _ in request.partitions} if request is not None else set()
    out = {}
    for name, partition, target in plan.partitions:
        topic = snapshot.topics.get(name)
        key = (name, partition)
        if topic is None or partition not in topic.replicas:
            out[key] = Progress("failed", "the partition does not exist")
        elif key in pending:
            out[key] = Progress("in progress", "waiting for the controller to take it up")
        elif (move := _moves(topic)[partition]).moving:
            out[key] = (Progress("in progress") if move.target == target else
                        Progress("failed", f"another reassignment moves it to "
                                           f"{list(move.target)}"))
        elif move.replicas == target:
            out[key] = Progress("completed")
        else:
            out[key] = Progress("failed", f"its replicas are {list(move.replicas)}")
    return out


# --throttle ---------------------------------------------------------------------------------

def throttle_configs(plan: Plan, snapshot: FleetSnapshot) -> dict[str, dict[str, str]]:
    """Per topic, Kafka's throttled replicas for the partitions the plan moves: the leader
    side lists the replicas there now (any may lead the copy), the follower side the ones
    being added (`partition:node`, comma-separated)."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    for name, partition, target in plan.partitions:
        original = _moves(snapshot.topics[name])[partition].original
        added = [n for n in target if n not in original]
        if not added:
            continue
        leaders.setdefault(name, []).extend(f"{partition}:{n}" for n in original)
        followers.setdefault(name, []).extend(f"{partition}:{n}" for n in added)
    return {name: {LEADER_REPLICAS: ",".join(leaders[name]),
                   FOLLOWER_REPLICAS: ",".join(followers[name])} for name in sorted(leaders)}


def involved_nodes(plan: Plan, snapshot: FleetSnapshot) -> list[int]:
    """Every node holding or receiving a replica the plan moves: where the rates go."""
    nodes = set()
    for name, partition, target in plan.partitions:
        original = _moves(snapshot.topics[name])[partition].original
        if any(n not in original for n in target):
            nodes |= set(original) | set(target)
    return sorted(nodes)
