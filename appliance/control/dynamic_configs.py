"""Dynamic configs of entities other than topics: Kafka's `/config/<entity-type>/<name>`.

What workers and the supervisor both speak of (the store itself is the supervisor's:
`appliance.control.config_store` alone, `cluster.config_store` in a fleet). Entity types are
Kafka's: "brokers" (a node id, or "<default>" for every broker), "clients", "users", and
"users/<user>/clients" for a user's client ids; "<default>" names an entity type's default.
Values are strings, as Kafka keeps them; checking them is the caller's job (the handler of
the API that sets them knows what they mean), the store only keeps and spreads them.
"""

from __future__ import annotations

DEFAULT_ENTITY = "<default>"
ENTITY_TYPES = ("brokers", "clients", "users")

# entity type -> entity name -> {key: value}
Entities = dict[str, dict[str, dict[str, str]]]
Changes = dict[str, "str | None"]  # key -> new value, None: remove the key


def entity(entities: Entities, entity_type: str, name: str) -> dict[str, str]:
    """One entity's configs ({} when it has none)."""
    return dict(entities.get(entity_type, {}).get(name, {}))


def changed(current: dict[str, str], changes: Changes) -> dict[str, str]:
    """`current` with `changes` applied (None removes a key)."""
    new = dict(current)
    for key, value in changes.items():
        if value is None:
            new.pop(key, None)
        else:
            new[key] = value
    return new


def check_entity_type(entity_type: str) -> None:
    """Raise ValueError for a type the store does not keep."""
    parts = entity_type.split("/")
    if entity_type in ENTITY_TYPES or (len(parts) == 3 and parts[0] == "users"
                                       and parts[1] and parts[2] == "clients"):
        return
    raise ValueError(f"unknown entity type {entity_type!r}")
