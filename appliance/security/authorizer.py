"""The decision: may `principal` from `host` do `operation` on a resource? A pure function
of plain data, with Kafka's AclAuthorizer semantics:

1. A super user (`super.users`) may do everything.
2. The ACLs that apply to the resource are those of its type whose pattern covers its name:
   LITERAL with the same name, LITERAL '*', PREFIXED with a prefix of the name.
3. None apply: `allow.everyone.if.no.acl.found` decides (false by default).
4. A DENY that names the principal (or User:*), the host (or '*') and the operation (or
   ALL) refuses, whatever ALLOWs there are.
5. Else an ALLOW that names the principal, the host and the operation, ALL, or an operation
   that implies it (DESCRIBE is implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by
   ALTER_CONFIGS) permits; nothing else does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from appliance.security.acls import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

AUTHORIZER_CLASSES = frozenset({"kafka.security.authorizer.AclAuthorizer",
                                "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})

# an ALLOW of the key permits the operations of the value too (Kafka's implied operations)
_ALLOWED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE,
                                   Operation.DELETE, Operation.ALTER, Operation.ALL}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS,
                                           Operation.ALTER_CONFIGS, Operation.ALL}),
}


@dataclass(frozen=True)
class AuthorizerSettings:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


def parse_super_users(text: str) -> frozenset[str]:
    """Kafka's `super.users`: principals separated by semicolons (`User:a;User:b`)."""
    return frozenset(p.strip() for p in text.split(";") if p.strip())


class AclIndex:
    """The ACLs in force, indexed by resource so one decision looks at the few that apply."""

    def __init__(self, acls: Iterable[AclBinding] = ()) -> None:
        self.acls = frozenset(acls)
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[ResourceType, list[AclBinding]] = {}
        for acl in self.acls:
            if acl.pattern_type is PatternType.PREFIXED:
                self._prefixed.setdefault(acl.resource_type, []).append(acl)
            else:
                self._literal.setdefault((acl.resource_type, acl.resource_name), []).append(acl)

    def applying_to(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        found += [a for a in self._prefixed.get(resource_type, ())
                  if name.startswith(a.resource_name)]
        return found


def authorize(acls: AclIndex, settings: AuthorizerSettings, principal: str, host: str,
              operation: Operation, resource_type: ResourceType, name: str) -> bool:
    """Whether the request is permitted (see the module docstring)."""
    if principal in settings.super_users:
        return True
    applying = acls.applying_to(resource_type, name)
    if not applying:
        return settings.allow_everyone_if_no_acl_found
    mine = [a for a in applying if a.principal in (principal, WILDCARD_PRINCIPAL)
            and a.host in (host, WILDCARD)]
    if any(a.permission is Permission.DENY and a.operation in (operation, Operation.ALL)
           for a in mine):
        return False
    allowed_by = _ALLOWED_BY.get(operation, frozenset({operation, Operation.ALL}))
    return any(a.permission is Permission.ALLOW and a.operation in allowed_by for a in mine)
