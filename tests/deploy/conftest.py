"""Three booted Debian hosts, shared by tests/deploy's modules: booting is the expensive part.

Each module wipes what an earlier one deployed (`playbook.wipe`) and deploys its own fleet on
them; the wheels klog's playbook builds are kept for the whole package as well, and so is klog's
venv on the hosts. The secured fleet is deployed first (`pytest_collection_modifyitems`): on the
fresh hosts it installs klog; the plaintext fleet after it finds that version installed, and
its rolling upgrade, which installs another, is the last deployment (the other order installed
klog twice and then rolled the secured fleet back to the first version: a minute of copying).
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy import hosts, rootfs
from tests.deploy.playbook import ANSIBLE_PLAYBOOK, FIGURES

NEEDS_FREE_BYTES = 5 << 30


# the order of the modules that deploy on the booted hosts (the others keep theirs)
DEPLOY_ORDER = ("test_secured_playbook.py", "test_playbook_security.py",
                "test_cluster_playbook.py")


def pytest_collection_modifyitems(items):
    """tests/deploy's items in DEPLOY_ORDER, in the slots they had (so still side by side, as
    the package's booted hosts want), each module's own order kept."""
    here = Path(__file__).parent
    slots = [i for i, item in enumerate(items) if item.path.parent == here]
    ranked = sorted((items[i] for i in slots), key=lambda item: (
        DEPLOY_ORDER.index(item.path.name) if item.path.name in DEPLOY_ORDER
        else len(DEPLOY_ORDER)))
    for slot, item in zip(slots, ranked):
        items[slot] = item


@dataclass
class Booted:
    fleet: hosts.Fleet
    workdir: Path
    log: Path  # every ansible-playbook run's output, appended
    wheels: tuple[str, ...]  # the -e that points the playbook at this package's wheelhouse


@pytest.fixture(scope="package")
def booted(tmp_path_factory):
    reason = hosts.unavailable_reason()
    if reason:
        pytest.skip(reason)
    assert ANSIBLE_PLAYBOOK.exists(), "ansible-playbook is missing: pip install -e '.[deploy]'"
    workdir = tmp_path_factory.mktemp("deploy")
    hosts.clean_leftovers()
    # the hosts' overlays peak at about 2.2 GB (the root filesystem's cache aside): a disk
    # that fills meanwhile shows up as produce requests retried until the clients give up
    free = shutil.disk_usage(workdir).free
    assert free >= NEEDS_FREE_BYTES, (f"the deploy test needs {NEEDS_FREE_BYTES >> 30} GiB "
                                      f"free under {workdir}; {free / 2**30:.1f} GiB are")
    started = time.monotonic()
    root = rootfs.rootfs()
    FIGURES["root filesystem ready (s)"] = time.monotonic() - started
    fleet = hosts.Fleet(workdir, root, ["h1", "h2", "h3"])
    try:
        started = time.monotonic()
        fleet.start()
        FIGURES["three hosts booted (s)"] = time.monotonic() - started
        # a wheelhouse of this run only: the test builds klog's wheels as an operator would
        yield Booted(fleet, workdir, workdir / "ansible.log",
                     ("-e", f"klog_wheels_dir={workdir / 'wheelhouse'}"))
    finally:
        fleet.close()
        print("\ndeploy figures: " + ", ".join(f"{k}: {v:.0f}" for k, v in FIGURES.items()),
              file=sys.stderr)
