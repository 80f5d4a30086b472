"""What the admin sub-commands (`klog topics`, `klog groups`) share: one Admin connection for
the chosen action, and a client error turned into one line on stderr and exit status 1."""

from __future__ import annotations

import sys

from klog.admin import Admin
from klog.errors import KlogError


def run_action(args, actions: dict) -> int:
    """``actions[args.action](admin, args)`` on an Admin to ``args.bootstrap_server``."""
    try:
        with Admin(args.bootstrap_server) as admin:
            return actions[args.action](admin, args)
    except (KlogError, ValueError) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1
