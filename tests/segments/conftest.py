"""Fixtures for the storage engine tests: a log directory and a small-segment config."""

from __future__ import annotations

import pytest

from appliance.segments import LogConfig, PartitionLog, faults

SMALL = LogConfig(
    segment_bytes=4096,
    index_interval_bytes=256,
    segment_index_bytes=1024,
    retention_ms=-1,
    file_delete_delay_ms=1000,
)


@pytest.fixture(autouse=True)
def _no_armed_faults():
    yield
    faults.disarm()


@pytest.fixture
def log_dir(tmp_path):
    return str(tmp_path / "topic-0")


@pytest.fixture
def open_log(log_dir):
    """open_log(config=SMALL, now_ms=0, verify="tail", attach=None) -> PartitionLog, closed
    at teardown."""
    opened = []

    def _open(config: LogConfig = SMALL, *, now_ms: int = 0, verify: str = "tail",
              attach=None):
        log = PartitionLog.open(log_dir, config, now_ms=now_ms, verify=verify, attach=attach)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()


class Crash(BaseException):
    """Raised by an armed fault point to stop an operation where a SIGKILL would."""


def crash(log: PartitionLog) -> None:
    """Leave the files exactly as a SIGKILL would: untrimmed, indexes as they are, the state
    file saying 'unclean'. Only the descriptors and maps of this process are released."""
    for segment in log.segments.all_including_retired():
        segment.active = False  # so that close() does not seal (trim) anything
        segment.close()
    log._closed = True
