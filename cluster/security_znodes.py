"""The security znodes of a fleet, in Kafka's layout and JSON: SCRAM credentials, ACLs and
the change notifications that tell every broker to re-read them.

Pure: bytes in, values out, and back; a payload that does not parse raises `ZnodeError`
naming the path.

- `/config/users/<name>`: `{"version":1,"config":{"SCRAM-SHA-512":"salt=<b64>,stored_key=
  <b64>,server_key=<b64>,iterations=4096"}}` (Kafka's ScramCredentialUtils string; other keys
  of the node, such as a user's quotas, are kept as they are). Readable by the appliances only
  (`zookeeper.set.acl`).
- `/config/changes/config_change_NNNNNNNNNN` (sequential): `{"version":2,"entity_path":
  "users/<name>"}` after each change of a user.
- `/kafka-acl/<ResourceType>/<name>` (LITERAL) and `/kafka-acl-extended/prefixed/<ResourceType>/
  <name>` (PREFIXED): `{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
  "operation":"Read","host":"*"}]}`, names as Kafka's SecurityUtils writes them ("Topic",
  "ClusterAction", "Allow").
- `/kafka-acl-changes/acl_changes_NNNNNNNNNN` (LITERAL: the text `TOPIC:<name>`) and
  `/kafka-acl-extended-changes/acl_changes_NNNNNNNNNN` (`{"version":1,"resourceType":"TOPIC",
  "name":"<name>","patternType":"PREFIXED"}`) after each change of a resource's ACLs.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import orjson

from cluster.znodes import ZnodeError
from klog.protocol.sasl import SCRAM_MECHANISMS
from klog.protocol.sasl.scram import ScramCredential

USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ACL_LITERAL = "/kafka-acl"
ACL_EXTENDED = "/kafka-acl-extended"
ACL_PREFIXED = "/kafka-acl-extended/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
LITERAL, PREFIXED = "LITERAL", "PREFIXED"

ROOTS = (USERS, CONFIG_CHANGES, ACL_LITERAL, ACL_PREFIXED, ACL_CHANGES, ACL_EXTENDED_CHANGES)
SECRET_ROOTS = (USERS,)  # no world READ on these or below (zookeeper.set.acl)

# Kafka's names in the ACL znodes (SecurityUtils): enum name -> the name written
RESOURCE_TYPES = {"TOPIC": "Topic", "GROUP": "Group", "CLUSTER": "Cluster",
                  "TRANSACTIONAL_ID": "TransactionalId", "DELEGATION_TOKEN": "DelegationToken",
                  "USER": "User"}
OPERATIONS = {"ALL": "All", "READ": "Read", "WRITE": "Write", "CREATE": "Create",
              "DELETE": "Delete", "ALTER": "Alter", "DESCRIBE": "Describe",
              "CLUSTER_ACTION": "ClusterAction", "DESCRIBE_CONFIGS": "DescribeConfigs",
              "ALTER_CONFIGS": "AlterConfigs", "IDEMPOTENT_WRITE": "IdempotentWrite"}
PERMISSIONS = {"ALLOW": "Allow", "DENY": "Deny"}


def is_secret(path: str) -> bool:
    """Whether a znode holds secrets: it then never gets world READ."""
    return any(path == root or path.startswith(root + "/") for root in SECRET_ROOTS)


def _load(data: bytes, path: str) -> dict:
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ZnodeError(f"{path}: not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ZnodeError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    return raw


def _camel_to_enum(table: dict[str, str], text: str, what: str, path: str) -> str:
    """Kafka's reader takes either spelling, whatever the case ("Read", "READ", "read")."""
    folded = text.replace("_", "").lower()
    for enum_name, kafka_name in table.items():
        if folded == kafka_name.lower():
            return enum_name
    raise ZnodeError(f"{path}: unknown {what} {text!r}")


# SCRAM credentials -----------------------------------------------------------------------------


def user_path(name: str) -> str:
    return f"{USERS}/{name}"


def format_credential(credential: ScramCredential) -> str:
    """Kafka's ScramCredentialUtils string for one mechanism."""
    def b64(value: bytes) -> str:
        return base64.b64encode(value).decode()
    return (f"salt={b64(credential.salt)},stored_key={b64(credential.stored_key)},"
            f"server_key={b64(credential.server_key)},iterations={credential.iterations}")


def parse_credential(text: str, path: str = "") -> ScramCredential:
    try:
        fields = dict(item.split("=", 1) for item in text.split(","))
        return ScramCredential(base64.b64decode(fields["salt"], validate=True),
                               int(fields["iterations"]),
                               base64.b64decode(fields["stored_key"], validate=True),
                               base64.b64decode(fields["server_key"], validate=True))
    except (ValueError, KeyError, binascii.Error) as exc:
        raise ZnodeError(f"{path}: not a SCRAM credential: {exc!r}") from None


@dataclass(frozen=True)
class UserConfig:
    """`/config/users/<name>`: the user's SCRAM credentials and any other config key of the
    node (quotas Kafka may have written), kept untouched when klog rewrites the node."""

    credentials: dict[str, ScramCredential]
    other: dict[str, str]

    def encode(self) -> bytes:
        config = dict(self.other)
        config.update({m: format_credential(c) for m, c in sorted(self.credentials.items())})
        return orjson.dumps({"version": 1, "config": config})

    @classmethod
    def decode(cls, data: bytes | None, path: str) -> UserConfig:
        if not data:
            return cls({}, {})
        config = _load(data, path).get("config", {})
        if not isinstance(config, dict):
            raise ZnodeError(f"{path}: config is not an object")
        credentials, other = {}, {}
        for key, value in config.items():
            if key in SCRAM_MECHANISMS:
                credentials[key] = parse_credential(str(value), path)
            else:
                other[str(key)] = str(value)
        return cls(credentials, other)


def encode_config_change(entity_path: str) -> bytes:
    """A `/config/changes/config_change_` notification, Kafka's version 2."""
    return orjson.dumps({"version": 2, "entity_path": entity_path})


# ACLs ------------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class AclResource:
    """A resource pattern: `resource_type` and `pattern` are enum names ("TOPIC", "LITERAL")."""

    resource_type: str
    pattern: str
    name: str

    @property
    def path(self) -> str:
        root = ACL_LITERAL if self.pattern == LITERAL else ACL_PREFIXED
        return f"{root}/{RESOURCE_TYPES[self.resource_type]}/{self.name}"

    def change_notification(self) -> tuple[str, bytes]:
        """Where and what to write (sequentially) after this resource's ACLs change."""
        if self.pattern == LITERAL:
            return (f"{ACL_CHANGES}/{ACL_CHANGE_PREFIX}",
                    f"{self.resource_type}:{self.name}".encode())
        return (f"{ACL_EXTENDED_CHANGES}/{ACL_CHANGE_PREFIX}",
                orjson.dumps({"version": 1, "resourceType": self.resource_type,
                              "name": self.name, "patternType": self.pattern}))


def resource_of_path(path: str) -> AclResource:
    """The resource an ACL znode's path names (`/kafka-acl/Topic/a`)."""
    for root, pattern in ((ACL_PREFIXED + "/", PREFIXED), (ACL_LITERAL + "/", LITERAL)):
        if path.startswith(root):
            kind, slash, name = path[len(root):].partition("/")
            if slash and name:
                return AclResource(_camel_to_enum(RESOURCE_TYPES, kind, "resource type",
                                                  path), pattern, name)
    raise ZnodeError(f"{path}: not an ACL znode path")


@dataclass(frozen=True, order=True)
class AclEntry:
    """One ACL of a resource: `operation` and `permission` are enum names ("READ", "ALLOW")."""

    principal: str
    permission: str
    operation: str
    host: str


def encode_acls(entries: frozenset[AclEntry] | set[AclEntry]) -> bytes:
    return orjson.dumps({"version": 1, "acls": [
        {"principal": e.principal, "permissionType": PERMISSIONS[e.permission],
         "operation": OPERATIONS[e.operation], "host": e.host} for e in sorted(entries)]})


def decode_acls(data: bytes | None, path: str) -> frozenset[AclEntry]:
    if not data:
        return frozenset()
    raw = _load(data, path)
    try:
        return frozenset(
            AclEntry(str(a["principal"]),
                     _camel_to_enum(PERMISSIONS, str(a["permissionType"]), "permission", path),
                     _camel_to_enum(OPERATIONS, str(a["operation"]), "operation", path),
                     str(a["host"]))
            for a in raw["acls"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ZnodeError(f"{path}: not an ACL znode: {exc!r}") from None
