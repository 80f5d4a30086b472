"""The fleet admin requests a worker relays through its supervisor (`ClusterAdmin` on the
control channel): ElectLeaders and Alter/ListPartitionReassignments in cluster mode.

Arguments and answers are JSON (the channel carries them as text, so a new request needs no
new message type):
- "elect": `{"partitions": [[topic, partition], ...] | null, "unclean": bool}` ->
  `{"results": [[topic, partition, code, message], ...]}`. Only the controller elects, as in
  Kafka: elsewhere the answer is NOT_CONTROLLER (clients send it to the controller; they
  ask again after a Metadata refresh).
- "alter_reassignments": `{"partitions": [[topic, partition, replicas | null], ...],
  "timeout_ms": int}` -> `{"results": [[topic, partition, code, message], ...]}`.
- "list_reassignments": `{"topics": [[topic, [partition, ...]], ...] | null}` ->
  `{"topics": [[topic, [[partition, replicas, adding, removing], ...]], ...]}`.
ZooKeeper out of reach answers REQUEST_TIMED_OUT (retriable), nothing changed.
"""

from __future__ import annotations

import logging

import orjson

from cluster import admin_elections, admin_reassignments
from cluster.controller import Fenced
from cluster.fleet_view import read_fleet
from cluster.member import ClusterMember
from cluster.session import ZooKeeperUnavailable
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

MAX_WAIT_S = 10.0  # the supervisor's loop waits with the request: never longer than this


def serve(member: ClusterMember, op: str, args: str) -> tuple[ErrorCode, str | None]:
    """(top-level error, the answer's JSON)."""
    raw = orjson.loads(args)
    try:
        if op == "elect":
            return _elect(member, raw)
        if op == "alter_reassignments":
            answers = admin_reassignments.alter(
                member.session, [(t, p, None if r is None else tuple(r))
                                 for t, p, r in raw["partitions"]],
                min(MAX_WAIT_S, max(0.0, raw.get("timeout_ms", 60000) / 1000)))
            member.wake()
            return ErrorCode.NONE, _results(answers)
        if op == "list_reassignments":
            wanted = raw["topics"]
            found = admin_reassignments.ongoing(read_fleet(member.session, None), wanted)
            return ErrorCode.NONE, orjson.dumps(
                {"topics": [[name, parts] for name, parts in found.items()]}).decode()
    except ZooKeeperUnavailable as exc:
        return ErrorCode.REQUEST_TIMED_OUT, f"ZooKeeper is unreachable: {exc}"
    return ErrorCode.INVALID_REQUEST, f"unknown fleet admin request {op!r}"


def _elect(member: ClusterMember, raw: dict) -> tuple[ErrorCode, str | None]:
    election = member.election
    if election is None:
        return ErrorCode.NOT_CONTROLLER, "this appliance is not the controller"
    partitions = (None if raw["partitions"] is None
                  else [(t, p) for t, p in raw["partitions"]])
    try:
        answers, written = admin_elections.elect(member.session, election, partitions,
                                                 unclean=bool(raw["unclean"]))
    except Fenced:
        return ErrorCode.NOT_CONTROLLER, "this appliance is no longer the controller"
    member.wake()  # the member's view must hold the new leaders before the worker answers
    member.wait_for(lambda s: all(_seen(s, t, p, state.leader_epoch)
                                  for (t, p), state in written.items()), MAX_WAIT_S / 2)
    return ErrorCode.NONE, _results(answers)


def _seen(snapshot, topic: str, partition: int, leader_epoch: int) -> bool:
    states = snapshot.topics[topic].states if topic in snapshot.topics else {}
    return partition in states and states[partition][0].leader_epoch >= leader_epoch


def _results(answers) -> str:
    return orjson.dumps({"results": [[t, p, int(code), message]
                                     for (t, p), (code, message) in answers.items()]}).decode()
