"""Where an appliance alone keeps its security files: `<first log dir>/.klog-security/`.

They lived beside the topic catalog (`.klog-catalog/`) at first, whose files are named after
the topics: a topic called `acls` or `scram-credentials` would have been written over the
ACLs or the users, and the catalog read each security file as a topic that does not parse.
Topic names cannot make `.klog-security`, nor anything in it.

A file an earlier klog left in the catalog's directory is moved here the first time its path
is asked for (by `klog users`/`klog acls` before a start, or by the appliance), unless it is
a topic's description after all.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from appliance.atomic_files import write_atomically

log = logging.getLogger(__name__)

SECURITY_DIR = ".klog-security"
EARLIER_DIR = ".klog-catalog"


def security_file(first_log_dir: Path, name: str) -> Path:
    """The path of security file `name`, moving an earlier klog's copy of it here first."""
    path = Path(first_log_dir) / SECURITY_DIR / name
    earlier = Path(first_log_dir) / EARLIER_DIR / name
    if not path.exists() and earlier.exists() and not _is_topic(earlier):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            os.replace(earlier, path)
        except FileNotFoundError:  # another process of the appliance moved it first
            pass
        else:
            log.info("moved %s to %s", earlier, path)
    return path


def _is_topic(path: Path) -> bool:
    """Whether the catalog's file is a topic's description (it names its topic)."""
    try:
        return "name" in json.loads(path.read_bytes())
    except (OSError, ValueError, TypeError):
        return False


def write_private(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically (temp file, fsync, rename, fsync of the
    directory), readable by its owner only: a crash leaves the old file or the new one, and
    a password's salted keys are never readable by another user, even for a moment."""
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomically(path, data, mode=0o600)
