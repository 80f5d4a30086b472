"""`klog load-hourly`: load hours of a topic into the Parquet warehouse with Spark (local by
default), exactly once per hour. The loader is `klog_pipeline`'s; this module only plugs its
command line into `klog` (the spark-submit job file `klog_pipeline/job.py` takes the same options).

    klog load-hourly -b HOST:PORT -t clicks --hour 2026-11-21T13 --warehouse PATH
    klog load-hourly -b HOST:PORT -t clicks --catch-up --warehouse PATH   # what the timer runs
"""

from __future__ import annotations

from klog_pipeline import arguments


def add_arguments(parser) -> None:
    arguments.add_arguments(parser)


def run(args) -> int:
    return arguments.run(args)
