"""The `klog` command itself: `--version`, and a library-only install asking for the extra."""

from __future__ import annotations

import importlib.metadata
import tomllib

import pytest

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


def test_without_the_appliance_extra_the_command_says_what_to_install(monkeypatch, capsys):
    def missing_dependency():
        raise ModuleNotFoundError("No module named 'posix_ipc'", name="posix_ipc")

    monkeypatch.setattr(klog_main, "build_parser", missing_dependency)
    assert klog_main.main(["status"]) == 2
    assert "pip install 'klog[appliance]'" in capsys.readouterr().err


def test_a_missing_module_of_our_own_is_a_bug_and_raises(monkeypatch):
    def missing_own_module():
        raise ModuleNotFoundError("No module named 'klog_cli.nothing'", name="klog_cli.nothing")

    monkeypatch.setattr(klog_main, "build_parser", missing_own_module)
    with pytest.raises(ModuleNotFoundError):
        klog_main.main(["status"])
