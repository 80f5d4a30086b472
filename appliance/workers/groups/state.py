"""The classic group states and the only moves between them, as a table (Kafka's
``GroupState.validPreviousStates`` read the other way round)."""

from __future__ import annotations

import enum


class GroupState(enum.Enum):
    EMPTY = "Empty"  # no members; may still hold committed offsets
    PREPARING_REBALANCE = "PreparingRebalance"  # waiting for the members to (re)join
    COMPLETING_REBALANCE = "CompletingRebalance"  # joined; waiting for the leader's assignment
    STABLE = "Stable"  # assignment handed out; members heartbeat
    DEAD = "Dead"  # deleted, or its partition moved away; never used again


S = GroupState
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE, S.DEAD}),
    S.PREPARING_REBALANCE: frozenset({S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE, S.STABLE, S.DEAD}),
    S.STABLE: frozenset({S.PREPARING_REBALANCE, S.DEAD}),
    S.DEAD: frozenset({S.DEAD}),
}


class IllegalTransition(RuntimeError):
    """A bug: the coordinator tried a move the table does not allow."""


def check_transition(current: GroupState, target: GroupState) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(f"group state {current.value} cannot become {target.value}")
