"""The supervisor's ACLs of an appliance alone: the set in force and its file.

Every CreateAcls and DeleteAcls of every worker comes here over the control channel, so there
is one writer of `acls.json`; the control server broadcasts the new set to every worker after
each change. The file is written before the set changes in memory: an ACL the client was told
exists survives a restart, and a write that fails changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from appliance.security.acl_file import read_acls, write_acls
from appliance.security.acls import AclBinding, AclFilter

log = logging.getLogger(__name__)


class AclBook:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.acls: frozenset[AclBinding] = read_acls(self.path)

    def create(self, acls: Iterable[AclBinding]) -> bool:
        """Add `acls` (adding one that exists changes nothing); True if the set changed.
        Raises OSError when the file cannot be written (the set is then unchanged)."""
        new = self.acls | frozenset(acls)
        return self._replace(new)

    def delete(self, filters: Iterable[AclFilter]) -> frozenset[AclBinding]:
        """Remove what any filter matches; the ACLs removed. Raises OSError as `create`."""
        filters = list(filters)
        removed = frozenset(a for a in self.acls if any(f.matches(a) for f in filters))
        self._replace(self.acls - removed)
        return removed

    def _replace(self, new: frozenset[AclBinding]) -> bool:
        if new == self.acls:
            return False
        write_acls(self.path, new)
        self.acls = new
        log.info("ACLs: %d in force", len(new))
        return True
