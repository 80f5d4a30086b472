"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455) from an admin client, on
the reassignment machinery `klog cluster reassign` uses (reassignment.py: the controller
takes a request up from `/admin/reassign_partitions` and records each move in the topic's
assignment, with its adding and removing replicas).

`alter` checks each partition as the controller will (`reassignment.refusal`) and answers
Kafka's codes: UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not exist,
INVALID_REPLICA_ASSIGNMENT for a replica list the fleet cannot take (an unknown or dead
node, one listed twice, two on one appliance, an empty list), NO_REASSIGNMENT_IN_PROGRESS
for cancelling (a null replica list) a partition that is not moving. A refused partition
changes nothing; the accepted ones go into one request, and the call returns once the
controller has taken it up (bounded: REQUEST_TIMED_OUT). Cancelling is a move back to the
original replicas, as `--cancel` is.
"""

from __future__ import annotations

import time

from cluster.fleet_view import FleetSnapshot, TopicState, read_fleet
from cluster.reassign_admin import RequestPending, submit
from cluster.reassign_plan import Plan
from cluster.reassignment import Move, refusal
from cluster.session import Session
from klog.protocol.error_codes import ErrorCode

Answer = tuple[ErrorCode, str | None]
POLL_S = 0.1


def _move(topic: TopicState, partition: int) -> Move:
    return Move(topic.replicas[partition], topic.adding.get(partition, ()),
                topic.removing.get(partition, ()))


def check(snapshot: FleetSnapshot, name: str, partition: int,
          replicas: tuple[int, ...] | None) -> tuple[Answer, tuple[int, ...] | None]:
    """The answer for one partition and the target to request (None: nothing to request)."""
    topic = snapshot.topics.get(name)
    if topic is None or name in snapshot.deleting or partition not in topic.replicas:
        return (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"partition {name}-{partition} does not exist"), None
    move = _move(topic, partition)
    if replicas is None:
        if not move.moving:
            return (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                    f"no reassignment of {name}-{partition} is in progress"), None
        return (ErrorCode.NONE, None), move.original
    problem = refusal(topic, partition, replicas, set(snapshot.brokers))
    if problem is not None:
        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem), None
    return (ErrorCode.NONE, None), replicas


def alter(session: Session, wanted: list[tuple[str, int, tuple[int, ...] | None]],
          timeout_s: float) -> dict[tuple[str, int], Answer]:
    """Request the moves and cancellations; the answer per partition. Raises
    ZooKeeperUnavailable."""
    deadline = time.monotonic() + timeout_s
    snapshot = read_fleet(session, None)
    answers: dict[tuple[str, int], Answer] = {}
    targets = []
    for name, partition, replicas in wanted:
        answer, target = check(snapshot, name, partition, replicas)
        answers[(name, partition)] = answer
        if target is not None:
            targets.append((name, partition, target))
    if not targets:
        return answers
    while True:
        try:
            submit(session, Plan(tuple(targets)))
            break
        except RequestPending as exc:  # another request waits for the controller: ours next
            if time.monotonic() >= deadline:
                return {**answers, **{(t, p): (ErrorCode.REQUEST_TIMED_OUT, str(exc))
                                      for t, p, _ in targets}}
            time.sleep(POLL_S)
    while read_fleet(session, None).reassign_request is not None:
        if time.monotonic() >= deadline:
            return {**answers, **{(t, p): (ErrorCode.REQUEST_TIMED_OUT,
                                           "the controller has not taken the request up yet; "
                                           "it will")
                                  for t, p, _ in targets}}
        time.sleep(POLL_S)
    return answers


def ongoing(snapshot: FleetSnapshot, wanted: list[tuple[str, list[int]]] | None
            ) -> dict[str, list[tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]]]:
    """The moves in flight: topic -> [(partition, replicas, adding, removing)]; `wanted`
    None: every topic. Partitions not moving (or unknown) are left out, as Kafka does."""
    if wanted is None:
        wanted = [(name, sorted(topic.replicas)) for name, topic in snapshot.topics.items()]
    found: dict[str, list] = {}
    for name, partitions in wanted:
        topic = snapshot.topics.get(name)
        if topic is None or name in snapshot.deleting:
            continue
        for partition in partitions:
            if partition not in topic.replicas:
                continue
            move = _move(topic, partition)
            if move.moving:
                found.setdefault(name, []).append(
                    (partition, move.replicas, move.adding, move.removing))
    return found
