"""Quota entities and values: Kafka's validation of AlterClientQuotas, the matching of
DescribeClientQuotas, and KIP-55's precedence of the eight entities that may set a client's
quota.

An entity is a sorted tuple of (entity type, name) pairs, a name of None being the default
entity (`<default>` in ZooKeeper's /config/users/<default>/clients/<default>).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from klog.protocol.error_codes import ErrorCode

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"  # KIP-599: stored, not enforced
# the keys of user and client-id entities, and whether Kafka declares them LONG (whole values)
QUOTA_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False,
              CONTROLLER_MUTATION_RATE: False}

Entity = tuple[tuple[str, str | None], ...]


def entity(pairs) -> Entity:
    return tuple(sorted((t, n) for t, n in pairs))


class QuotaError(ValueError):
    """Kafka's refusal of one entry or filter: a code and its message."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


def check_entity(pairs: list[tuple[str, str | None]]) -> Entity:
    """The entity of an AlterClientQuotas entry, or QuotaError as Kafka answers."""
    if not pairs:
        raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    types = [t for t, _ in pairs]
    for entity_type in types:
        if entity_type == IP:
            raise QuotaError(ErrorCode.INVALID_REQUEST, "klog does not enforce ip quotas")
        if entity_type not in (USER, CLIENT_ID):
            raise QuotaError(ErrorCode.INVALID_REQUEST,
                             f"Unhandled client quota entity type: {entity_type}")
    if len(set(types)) != len(types):
        raise QuotaError(ErrorCode.INVALID_REQUEST,
                         f"Duplicate entity type in client quota entity: {types}")
    for entity_type, name in pairs:
        if name is not None and name == "" and entity_type == USER:
            raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid empty user name")
    return entity(pairs)


def check_op(key: str, value: float, remove: bool) -> None:
    """One operation of an entry: a known key and, when set, a valid value."""
    whole = QUOTA_KEYS.get(key)
    if whole is None:
        raise QuotaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if remove:
        return
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise QuotaError(ErrorCode.INVALID_REQUEST,
                         f"Invalid value {value} for configuration {key}: must be positive")
    if whole and abs(value - round(value)) > 1e-6:
        raise QuotaError(ErrorCode.INVALID_REQUEST, f"Configuration {key} must be a Long value")


def apply_ops(current: dict[str, float], ops: list[tuple[str, float, bool]]) -> dict[str, float]:
    """The entity's values after the (checked) operations."""
    values = dict(current)
    for key, value, remove in ops:
        if remove:
            values.pop(key, None)
        else:
            values[key] = float(value)
    return values


# DescribeClientQuotas --------------------------------------------------------------------

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


@dataclass(frozen=True)
class Component:
    entity_type: str
    match_type: int
    match: str | None


def check_filter(components: list[Component]) -> None:
    types = [c.entity_type for c in components]
    if len(set(types)) != len(types):
        raise QuotaError(ErrorCode.INVALID_REQUEST,
                         f"Duplicate filter component entity type: {types}")
    for c in components:
        if c.entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaError(ErrorCode.INVALID_REQUEST,
                             f"Custom entity type {c.entity_type!r} not supported")
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise QuotaError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected match type: {c.match_type}")
        if c.match_type == MATCH_EXACT and c.match is None:
            raise QuotaError(ErrorCode.INVALID_REQUEST,
                             "Exact match of an entity needs a name")
    if IP in types and len(types) > 1:
        raise QuotaError(ErrorCode.INVALID_REQUEST,
                         "Invalid entity filter component combination, IP filter component "
                         "should not be used with user or clientId filter component.")


def matches(ent: Entity, components: list[Component], strict: bool) -> bool:
    names = dict(ent)
    for c in components:
        if c.entity_type not in names:
            return False
        name = names[c.entity_type]
        if c.match_type == MATCH_EXACT and name != c.match:
            return False
        if c.match_type == MATCH_DEFAULT and name is not None:
            return False
        if c.match_type == MATCH_ANY and name is None:
            return False
    return not strict or len(names) == len(components)


# KIP-55 precedence -------------------------------------------------------------------------

def candidates(user: str, client_id: str) -> list[tuple[Entity, tuple[str, str]]]:
    """The entities that may hold a (user, client id)'s quota, the most specific first, each
    with the metric tags (user, client-id) Kafka gives the sensor it shares: the clients a
    default entity applies to each get their own, the tags naming what the entity names."""
    return [
        (entity([(USER, user), (CLIENT_ID, client_id)]), (user, client_id)),
        (entity([(USER, user), (CLIENT_ID, None)]), (user, client_id)),
        (entity([(USER, user)]), (user, "")),
        (entity([(USER, None), (CLIENT_ID, client_id)]), (user, client_id)),
        (entity([(USER, None), (CLIENT_ID, None)]), (user, client_id)),
        (entity([(USER, None)]), (user, "")),
        (entity([(CLIENT_ID, client_id)]), ("", client_id)),
        (entity([(CLIENT_ID, None)]), ("", client_id)),
    ]


def resolve(quotas: dict[Entity, dict[str, float]], user: str, client_id: str,
            key: str) -> tuple[float, tuple[str, str]] | None:
    """The quota `key` that applies to the client, and its sensor's tags; None: unlimited."""
    for ent, tags in candidates(user, client_id):
        values = quotas.get(ent)
        if values is not None and key in values:
            return values[key], tags
    return None
