"""The supervisor's ACLs in a fleet: the same interface as `AclBook`, kept in ZooKeeper.

CreateAcls and DeleteAcls of any appliance write Kafka's ACL znodes (`/kafka-acl/<Type>/<name>`,
`/kafka-acl-extended/prefixed/<Type>/<name>`) and a change notification, through the fleet's
security store (`cluster.security_store`, reached through `FleetMembership`: this module does
not import the fleet package). Every appliance's store sees the notification and its
supervisor tells its workers (`ControlServer.broadcast_security`). Rows are the store's plain
tuples of Kafka's enum names.
"""

from __future__ import annotations

from collections.abc import Iterable

from appliance.security.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)


def binding_of_row(row: tuple[str, ...]) -> AclBinding | None:
    """The binding a store row holds; None for a resource type or operation klog does not
    know (written by another tool): it is kept in ZooKeeper, and not enforced here."""
    rtype, pattern, name, principal, permission, operation, host = row
    try:
        return AclBinding(ResourceType[rtype], name, PatternType[pattern], principal, host,
                          Operation[operation], Permission[permission])
    except KeyError:
        return None


def resource_of(acl: AclBinding) -> tuple[str, str, str]:
    return acl.resource_type.name, acl.pattern_type.name, acl.resource_name


def entry_of(acl: AclBinding) -> tuple[str, str, str, str]:
    return acl.principal, acl.permission.name, acl.operation.name, acl.host


def _by_resource(acls: Iterable[AclBinding]) -> dict[tuple[str, str, str], frozenset]:
    grouped: dict[tuple[str, str, str], set] = {}
    for acl in acls:
        grouped.setdefault(resource_of(acl), set()).add(entry_of(acl))
    return {resource: frozenset(entries) for resource, entries in grouped.items()}


class FleetAclBook:
    """`fleet` offers `acl_rows()` and `update_acls(resource, change)` (FleetMembership)."""

    def __init__(self, fleet) -> None:
        self.fleet = fleet

    @property
    def acls(self) -> frozenset[AclBinding]:
        bindings = (binding_of_row(row) for row in self.fleet.acl_rows())
        return frozenset(b for b in bindings if b is not None)

    def create(self, acls: Iterable[AclBinding]) -> bool:
        """Add `acls`; True if the set changed. Raises OSError (ZooKeeper unavailable)."""
        before = self.acls
        for resource, entries in _by_resource(acls).items():
            self.fleet.update_acls(resource, lambda current, e=entries: current | e)
        return self.acls != before

    def delete(self, filters: Iterable[AclFilter]) -> frozenset[AclBinding]:
        """Remove what any filter matches; the ACLs removed. Raises OSError as `create`."""
        filters = list(filters)
        removed = frozenset(a for a in self.acls if any(f.matches(a) for f in filters))
        for resource, entries in _by_resource(removed).items():
            self.fleet.update_acls(resource, lambda current, e=entries: current - e)
        return removed
