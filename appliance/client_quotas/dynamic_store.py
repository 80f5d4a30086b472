"""Client quotas kept in the dynamic config store (`appliance.control.dynamic_configs`), where
Kafka keeps them: /config/users/<user>, /config/clients/<client-id> and
/config/users/<user>/clients/<client-id>, "<default>" naming a default entity. Alone the
supervisor keeps them beside the catalog; in a fleet ZooKeeper does, with Kafka's change
notifications, and every worker of every appliance receives them over its control channel.

Values are strings there, as Kafka writes them: the byte rates as whole numbers, the
percentages as decimals. Only the quota keys of an entity are read (a user's znode also holds
its SCRAM credentials in a fleet, which this module never touches).
"""

from __future__ import annotations

from appliance.client_quotas.entities import CLIENT_ID, QUOTA_KEYS, USER, Entity, entity
from appliance.client_quotas.store import QuotaStoreError
from appliance.control.dynamic_configs import DEFAULT_ENTITY

USERS, CLIENTS = "users", "clients"


def _name(raw: str) -> str | None:
    return None if raw == DEFAULT_ENTITY else raw


def _raw(name: str | None) -> str:
    return DEFAULT_ENTITY if name is None else name


def _values(configs: dict[str, str]) -> dict[str, float]:
    values = {}
    for key, text in configs.items():
        if key in QUOTA_KEYS:
            try:
                values[key] = float(text)
            except ValueError:
                continue
    return values


def quotas_of(entities: dict[str, dict[str, dict[str, str]]]) -> dict[Entity, dict[str, float]]:
    """The quota entities among the store's: user, client-id and user+client-id ones."""
    found: dict[Entity, dict[str, float]] = {}
    for entity_type, names in entities.items():
        parts = entity_type.split("/")
        for raw, configs in names.items():
            values = _values(configs)
            if not values:
                continue
            if entity_type == USERS:
                found[entity([(USER, _name(raw))])] = values
            elif entity_type == CLIENTS:
                found[entity([(CLIENT_ID, _name(raw))])] = values
            elif len(parts) == 3 and parts[0] == USERS and parts[2] == CLIENTS:
                found[entity([(USER, _name(parts[1])), (CLIENT_ID, _name(raw))])] = values
    return found


def path_of(ent: Entity) -> tuple[str, str]:
    """(entity type, name) of the store for a quota entity."""
    names = dict(ent)
    if USER in names and CLIENT_ID in names:
        return f"{USERS}/{_raw(names[USER])}/{CLIENTS}", _raw(names[CLIENT_ID])
    if USER in names:
        return USERS, _raw(names[USER])
    return CLIENTS, _raw(names[CLIENT_ID])


def _text(key: str, value: float) -> str:
    return str(round(value)) if QUOTA_KEYS[key] else repr(float(value))


class DynamicConfigQuotaStore:
    """`QuotaStore` over a worker's ControlPlane (`dynamic_configs`, `alter_dynamic_configs`)."""

    def __init__(self, control):
        self.control = control
        self.version = 0
        self._seen = None
        self._quotas: dict[Entity, dict[str, float]] = {}
        self.refresh()

    def quotas(self) -> dict[Entity, dict[str, float]]:
        self.refresh()
        return self._quotas

    def refresh(self, now_s: float = 0.0) -> None:
        """The control client replaces its dict on each broadcast: a new one is a change."""
        current = getattr(self.control, "dynamic_configs", None)
        if current is self._seen:
            return
        self._seen = current
        quotas = quotas_of(current or {})
        if quotas != self._quotas:
            self._quotas = quotas
            self.version += 1

    def alter(self, changes: dict[Entity, dict[str, float]]) -> None:
        """Each entity's quota keys become `values` (keys left out are removed)."""
        for ent, values in changes.items():
            before = self._quotas.get(ent, {})
            diff: dict[str, str | None] = {k: None for k in before if k not in values}
            diff.update({k: _text(k, v) for k, v in values.items()})
            entity_type, name = path_of(ent)
            code, message = self.control.alter_dynamic_configs(entity_type, name, diff)
            if code:
                raise QuotaStoreError(code, message or "the quota could not be stored")
        self.refresh()
