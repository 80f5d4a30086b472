"""`klog --version`: what a bug report quotes."""

from __future__ import annotations

import importlib.metadata
import tomllib

from klog_cli import main as klog_main
from tests.cli.test_appliance_cli import klog
from tests.conftest import REPO


def test_version_prints_the_installed_version_and_exits_0():
    result = klog("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"klog {importlib.metadata.version('klog')}\n"


def test_a_checkout_never_installed_names_its_pyproject_version(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert klog_main.version() == f"{declared} (not installed)"
