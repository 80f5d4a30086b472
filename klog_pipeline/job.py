"""The hourly load as a PySpark job file, for a Spark cluster::

    spark-submit --master spark://host:7077 --py-files klog-pipeline.zip klog_pipeline/job.py \
        --bootstrap-server broker:9092 --topic clicks --catch-up --warehouse /mnt/warehouse

Same options as ``klog load-hourly`` except ``--master`` (spark-submit's own). The session is
the one spark-submit made; executors need ``klog`` and ``klog_pipeline`` (``--py-files`` with a
zip of both, or a venv shipped with ``spark.archives``) and the warehouse mounted at the same
path as the driver (the hour is published with a POSIX rename).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if not __package__:  # run as a file by spark-submit: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from klog_pipeline.arguments import add_arguments, run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark-submit klog_pipeline/job.py",
                                     description="load hours of a klog topic into Parquet")
    add_arguments(parser, with_master=False)
    args = parser.parse_args(argv)
    from pyspark.sql import SparkSession

    from klog_pipeline.session import register

    spark = register(SparkSession.builder.appName(f"klog load-hourly {args.topic}")
                     .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    try:
        return run(args, spark=spark)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
