"""The ACLs of an appliance alone, in a file the supervisor owns.

``<first log dir>/.klog-security/acls.json``, mode 0600, replaced atomically (temp file, fsync,
rename, fsync of the directory), as the SCRAM credentials beside it. The supervisor reads it
at start and writes it for each CreateAcls/DeleteAcls that changes something; `klog acls
--config` edits it while the appliance is stopped. Format, klog's own::

    {"version": 1, "acls": [{"resource_type": "TOPIC", "resource_name": "a",
        "pattern_type": "LITERAL", "principal": "User:alice", "host": "*",
        "operation": "WRITE", "permission": "ALLOW"}]}
"""

from __future__ import annotations

import json
from pathlib import Path

from appliance.security.acls import AclBinding
from appliance.security_files import security_file, write_private

FILE_NAME = "acls.json"


def acls_path(first_log_dir: Path) -> Path:
    return security_file(first_log_dir, FILE_NAME)


def decode(data: bytes, *, source: str) -> frozenset[AclBinding]:
    """The ACLs of a file's contents. Raises ValueError naming the file and the problem."""
    try:
        return frozenset(AclBinding.from_dict(raw) for raw in json.loads(data)["acls"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{source}: not an ACL file: {exc!r}") from None


def encode(acls: frozenset[AclBinding]) -> bytes:
    return json.dumps({"version": 1, "acls": [a.to_dict() for a in sorted(acls)]},
                      indent=1).encode() + b"\n"


def read_acls(path: Path) -> frozenset[AclBinding]:
    """The ACLs in ``path``; none when it does not exist. Raises ValueError or OSError."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return frozenset()
    return decode(data, source=str(path))


def write_acls(path: Path, acls: frozenset[AclBinding]) -> None:
    """Replace the file atomically; it is created readable by its owner only."""
    write_private(Path(path), encode(acls))
