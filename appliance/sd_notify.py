"""systemd's notify protocol, written without python-systemd: one datagram per message.

Under `Type=notify`, systemd passes the socket's address in NOTIFY_SOCKET; outside systemd
the variable is absent and every call is a no-op. The supervisor alone talks to systemd
(NotifyAccess=main): READY=1 once every worker serves, STOPPING=1 on SIGTERM, WATCHDOG=1
every half WATCHDOG_USEC while the workers' heartbeats are fresh.
"""

from __future__ import annotations

import os
import socket


def notify(message: str) -> bool:
    """Send `message` (newline-separated KEY=VALUE pairs); False when not under systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address[0] == "@":
        address = "\0" + address[1:]  # the abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError:
        return False
    return True


def watchdog_interval_s() -> float | None:
    """Half of WATCHDOG_USEC, when systemd asks this process for watchdog pings."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid.isdigit() and int(pid) != os.getpid()):
        return None
    try:
        return int(usec) / 2_000_000
    except ValueError:
        return None
