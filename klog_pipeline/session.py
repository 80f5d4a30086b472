"""The SparkSession the pipeline runs on, and the registration of the ``klog`` data source.

`open_session` starts a local (or given) master with settings that suit a batch loader: no
web UI, no console progress bar (the loader draws its own), UTC session time, Spark's logs at
ERROR. For local masters it also makes the executors' Python the driver's own interpreter
and puts this checkout on their path, so ``klog`` and ``klog_pipeline`` import there without an
install. On a cluster (spark-submit) the job file uses the session spark-submit made and only
calls `register`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[1]
LOG4J = Path(__file__).resolve().with_name("log4j2.properties")


def register(spark: SparkSession) -> SparkSession:
    """Make ``format("klog")`` known to ``spark`` (registration is per session)."""
    from klog_pipeline.source import KlogDataSource

    spark.dataSource.register(KlogDataSource)
    return spark


def open_session(master: str = "local[*]", app_name: str = "klog-pipeline",
                 conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession on ``master`` with the pipeline's sources registered. Starting the JVM
    takes several seconds; raises if Java is missing (``make test`` installs it)."""
    if master.startswith("local"):
        _prepare_local_environment()
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J}")
               .config("spark.executor.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J}"))
    if master.startswith("local"):
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return register(spark)


def _prepare_local_environment() -> None:
    """Executors of a local master are children of the JVM, which inherits this environment:
    our interpreter for PySpark's workers, this checkout first on their path, loopback."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, paths)])
