"""The small interface client quotas need of a store: what the workers' enforcement and the two
APIs call. `dynamic_store.DynamicConfigQuotaStore` implements it over the dynamic config
store (Kafka's /config/users and /config/clients); tests may give a dict-backed one."""

from __future__ import annotations

from typing import Protocol

from appliance.client_quotas.entities import Entity


class QuotaStoreError(Exception):
    """The store refused or failed a change: Kafka's code and message for the entry."""

    def __init__(self, code, message: str):
        super().__init__(message)
        self.code = code


class QuotaStore(Protocol):
    version: int  # changes whenever the quotas do

    def quotas(self) -> dict[Entity, dict[str, float]]:
        """Every entity with at least one value (cheap: the store's current view)."""

    def refresh(self, now_s: float) -> None:
        """Pick up changes made elsewhere (another worker, another node); cheap."""

    def alter(self, changes: dict[Entity, dict[str, float]]) -> None:
        """Give each entity these values (keys left out are removed, an empty dict removes the
        entity); QuotaStoreError when the store refuses."""
