"""Kafka's ACL vocabulary: resource types, pattern types, operations, permissions (with
Kafka's wire numbers), one ACL binding, and the filters DescribeAcls and DeleteAcls take.

Plain data, no I/O: the decision (`appliance.security.authorizer`), the file
(`appliance.security.acl_file`), the control channel and the handlers all share it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

CLUSTER_NAME = "kafka-cluster"  # the only name a CLUSTER resource has, in Kafka
WILDCARD = "*"  # a LITERAL resource named "*" matches every name; User:* every principal
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# the resource types klog authorizes, and the operations an ACL on each may name (Kafka's
# AclEntry.supportedOperations)
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset({Operation.READ, Operation.WRITE, Operation.CREATE,
                                   Operation.DESCRIBE, Operation.DELETE, Operation.ALTER,
                                   Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE}),
    ResourceType.CLUSTER: frozenset({Operation.CREATE, Operation.CLUSTER_ACTION,
                                     Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
                                     Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                                     Operation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE, Operation.WRITE}),
}


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: `principal` from `host` is `permission`ed `operation` on the resources the
    pattern (`resource_type`, `resource_name`, `pattern_type`) covers."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def to_dict(self) -> dict:
        return {"resource_type": self.resource_type.name, "resource_name": self.resource_name,
                "pattern_type": self.pattern_type.name, "principal": self.principal,
                "host": self.host, "operation": self.operation.name,
                "permission": self.permission.name}

    @classmethod
    def from_dict(cls, raw: dict) -> AclBinding:
        """Raises ValueError/KeyError/TypeError for anything but `to_dict`'s shape."""
        binding = cls(ResourceType[raw["resource_type"]], _text(raw["resource_name"]),
                      PatternType[raw["pattern_type"]], _text(raw["principal"]),
                      _text(raw["host"]), Operation[raw["operation"]],
                      Permission[raw["permission"]])
        problem = invalid_reason(binding)
        if problem:
            raise ValueError(problem)
        return binding


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _enum(kind, value):
    try:
        return kind(value)
    except ValueError:
        return kind.UNKNOWN


def binding(resource_type: int, resource_name: str, pattern_type: int, principal: str,
            host: str, operation: int, permission: int) -> AclBinding:
    """A binding from wire numbers; an unknown number becomes UNKNOWN (`invalid_reason`
    then says why it cannot be stored)."""
    return AclBinding(_enum(ResourceType, resource_type), resource_name,
                      _enum(PatternType, pattern_type), principal, host,
                      _enum(Operation, operation), _enum(Permission, permission))


def invalid_reason(acl: AclBinding) -> str | None:
    """Why Kafka would refuse to store `acl` (CreateAcls answers INVALID_REQUEST), or None."""
    if acl.resource_type not in SUPPORTED_OPERATIONS:
        return f"resource type {acl.resource_type.name} is not supported"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"pattern type {acl.pattern_type.name} cannot be stored: LITERAL or PREFIXED"
    if not acl.resource_name:
        return "the resource name is empty"
    if acl.resource_type is ResourceType.CLUSTER and (
            acl.resource_name != CLUSTER_NAME or acl.pattern_type is not PatternType.LITERAL):
        return f"a CLUSTER resource is the LITERAL {CLUSTER_NAME!r}"
    kind, colon, name = acl.principal.partition(":")
    if not colon or not kind or not name:
        return f"principal {acl.principal!r} is not TYPE:NAME"
    if not acl.host:
        return "the host is empty (use '*')"
    if acl.permission not in (Permission.ALLOW, Permission.DENY):
        return f"permission {acl.permission.name} is not ALLOW or DENY"
    if acl.operation is not Operation.ALL and \
            acl.operation not in SUPPORTED_OPERATIONS[acl.resource_type]:
        return (f"operation {acl.operation.name} does not apply to "
                f"{acl.resource_type.name} resources")
    return None


@dataclass(frozen=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls select: ANY and None match everything; pattern type
    MATCH selects the bindings that would apply to the named resource (LITERAL of that name
    or of '*', PREFIXED of a prefix of it), as Kafka's ResourcePatternFilter."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def invalid_reason(self) -> str | None:
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value.name == "UNKNOWN":
                return f"the filter has an unknown {type(value).__name__}"
        return None

    def matches(self, acl: AclBinding) -> bool:
        return (self._matches_resource(acl)
                and self.principal in (None, acl.principal)
                and self.host in (None, acl.host)
                and self.operation in (Operation.ANY, acl.operation)
                and self.permission in (Permission.ANY, acl.permission))

    def _matches_resource(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type is PatternType.MATCH:
            name = self.resource_name
            if name is None:
                return True
            if acl.pattern_type is PatternType.LITERAL:
                return acl.resource_name in (name, WILDCARD)
            return name.startswith(acl.resource_name)
        if self.pattern_type not in (PatternType.ANY, acl.pattern_type):
            return False
        return self.resource_name in (None, acl.resource_name)


def filter_of(resource_type: int, resource_name: str | None, pattern_type: int,
              principal: str | None, host: str | None, operation: int,
              permission: int) -> AclFilter:
    """A filter from wire numbers (unknown numbers become UNKNOWN: `invalid_reason`)."""
    return AclFilter(_enum(ResourceType, resource_type), resource_name,
                     _enum(PatternType, pattern_type), principal, host,
                     _enum(Operation, operation), _enum(Permission, permission))
