"""The systemd timer and service of the hourly load pass ``systemd-analyze verify`` and say
what the issue asks: a few minutes after each hour, Persistent, --catch-up."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO, require_binary


def test_the_timer_and_service_verify(tmp_path):
    analyze = require_binary("systemd-analyze")
    service = (REPO / "systemd" / "klog-hourly-load.service").read_text()
    timer = (REPO / "systemd" / "klog-hourly-load.timer").read_text()
    assert "--catch-up" in service and "Type=oneshot" in service
    assert "OnCalendar=*-*-* *:05:00" in timer and "Persistent=true" in timer
    klog_binary = REPO / ".venv" / "bin" / "klog"
    (tmp_path / "klog-hourly-load.service").write_text(
        service.replace("/opt/klog/venv/bin/klog", str(klog_binary)))
    (tmp_path / "klog-hourly-load.timer").write_text(timer)
    result = subprocess.run([analyze, "verify", str(tmp_path / "klog-hourly-load.timer"),
                             str(tmp_path / "klog-hourly-load.service")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    calendar = subprocess.run([analyze, "calendar", "*-*-* *:05:00"], capture_output=True,
                              text=True)
    assert calendar.returncode == 0 and ":05:00" in calendar.stdout
