"""The Debian bookworm root filesystem that the deploy test boots, built once and cached.

Built with debootstrap outside the repository (KLOG_ROOTFS_CACHE, /var/cache/klog-tests by
default), so only the first run pays for it (about two minutes and 800 MB). The fleet hosts
reach no package index, so everything the playbook installs from Debian is already in it: the
JRE and ZooKeeper, python3-apt (Ansible's apt module) and python3-venv (the klog venv).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CACHE = Path(os.environ.get("KLOG_ROOTFS_CACHE", "/var/cache/klog-tests"))
MIRROR = os.environ.get("KLOG_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BASE = ("systemd,systemd-sysv,dbus,python3,python3-venv,python3-apt,iproute2,"
        "openssh-server,sudo")
# installed with apt inside the new root (debootstrap's resolver takes no Recommends and
# trips over the JRE's postinst on a root without /usr/share/man/man1)
EXTRA = "zookeeper openjdk-17-jre-headless"
# bump when the recipe changes: a cache of another recipe is rebuilt
RECIPE = f"1 {BASE} {EXTRA}"
MARKER = ".klog-rootfs-recipe"


def rootfs(log=print) -> Path:
    """The cached root filesystem, built first when missing or of another recipe."""
    root = CACHE / "bookworm"
    marker = root / MARKER
    if marker.exists() and marker.read_text() == RECIPE:
        return root
    partial = CACHE / "bookworm.partial"
    shutil.rmtree(partial, ignore_errors=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    log(f"building the bookworm root filesystem in {partial} (cached for later runs)")
    subprocess.run(["debootstrap", "--variant=minbase", f"--include={BASE}", "bookworm",
                    str(partial), MIRROR], check=True, stdout=subprocess.DEVNULL)
    install = (f"mkdir -p /usr/share/man/man1 && apt-get update -qq && "
               f"DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
               f"{EXTRA} && apt-get clean && rm -rf /var/lib/apt/lists/*")
    subprocess.run(["systemd-nspawn", "-q", "-D", str(partial), "--register=no", "--keep-unit",
                    "--pipe", "/bin/sh", "-c", install],
                   check=True, stdout=subprocess.DEVNULL)
    (partial / MARKER).write_text(RECIPE)
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    return root
