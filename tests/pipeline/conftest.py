"""One real local Spark (``local[2]``) and one real appliance for the whole directory: Spark
takes several seconds to start, so every test shares the session; topics are unique per test.
"""

from __future__ import annotations

import pytest

from tests.conftest import require_binary, running_appliance, topic_maker


@pytest.fixture(scope="session")
def spark():
    require_binary("java")
    from klog_pipeline.session import open_session

    session = open_session("local[2]", app_name="klog-tests",
                           conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """Two workers (two disks), and retention checked every 200 ms for the data-loss tests."""
    with running_appliance(tmp_path_factory.mktemp("pipeline-appliance"), log_dirs=2,
                           settings={"log.retention.check.interval.ms": "200"}) as appliance:
        yield appliance


@pytest.fixture(scope="session")
def topic_factory(broker):
    """``make(partitions=6, **configs) -> name``: a fresh topic on the directory's appliance."""
    return topic_maker(broker.bootstrap, partitions=6, prefix="clicks")


@pytest.fixture
def load_hourly(spark, broker):
    """``load(topic, warehouse, *args, now=Hour|ms) -> (status, output)``: `klog load-hourly`
    parsed by the real command line and run in-process on the shared Spark session."""
    import io
    from pathlib import Path

    from rich.console import Console

    from klog_cli.main import build_parser
    from klog_pipeline import arguments
    from klog_pipeline.hours import Hour

    def load(topic: str, warehouse: Path, *args: str, now) -> tuple[int, str]:
        now_ms = now.end_ms + 61_000 if isinstance(now, Hour) else now
        argv = ["load-hourly", "-b", broker.bootstrap, "-t", topic, "--warehouse",
                str(warehouse), "--now", str(now_ms), *args]
        out = io.StringIO()
        status = arguments.run(build_parser().parse_args(argv), spark=spark,
                               console=Console(file=out, width=120))
        return status, out.getvalue()

    return load
