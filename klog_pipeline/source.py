"""The ``klog`` data source: ``spark.read.format("klog")`` and ``spark.readStream...``.

Example::

    from klog_pipeline.source import KlogDataSource
    spark.dataSource.register(KlogDataSource)
    df = (spark.read.format("klog").option("bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "clicks").option("startingTimestamp", "1795438800000")
          .option("endingTimestamp", "1795442400000").load())

Options: see `klog_pipeline.options`. Output: Spark's Kafka source schema (key, value, topic,
partition, offset, timestamp, timestampType, and headers with ``includeHeaders=true``).

Where things run: ``partitions()`` on the driver side (it asks the appliance for offsets and
plans one task per partition, more with ``minPartitions``); ``read()`` on executors, which
need ``klog`` and ``klog_pipeline`` importable (the venv as ``PYSPARK_PYTHON``, or ``--py-files``).
The reader is pickled to the executors: it holds the parsed options only, never a connection.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader

from klog_pipeline.lookups import LogLookups
from klog_pipeline.options import SourceOptions, parse_options
from klog_pipeline.planning import OffsetRange, plan_ranges, resolve, split_ranges
from klog_pipeline.range_reader import DDL, DDL_WITH_HEADERS, read_range


class KlogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "klog"

    def schema(self) -> str:
        headers = str(self.options.get("includeHeaders", "false")).lower() == "true"
        return DDL_WITH_HEADERS if headers else DDL

    def reader(self, schema) -> DataSourceReader:
        return KlogBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema):
        from klog_pipeline.stream import KlogStreamReader

        return KlogStreamReader(parse_options(self.options, streaming=True))


class KlogBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.source_options = options

    def partitions(self) -> list[OffsetRange]:
        with LogLookups.for_options(self.source_options) as lookups:
            ranges = plan_batch(self.source_options, lookups)
        return split_ranges(ranges, self.source_options.min_partitions)

    def read(self, partition):
        return read_range(self.source_options, partition)


def plan_batch(options: SourceOptions, lookups: LogLookups) -> list[OffsetRange]:
    """One range per partition from the starting to the ending bound, checked against the
    log (see `plan_ranges`)."""
    tps = lookups.partitions(options.subscription)
    earliest, latest = lookups.earliest(tps), lookups.latest(tps)
    starts = resolve(options.starting, tps, earliest, latest, lookups.for_times, role="start",
                     strategy=options.timestamp_strategy)
    ends = resolve(options.ending, tps, earliest, latest, lookups.for_times, role="end")
    return plan_ranges(tps, starts, ends, earliest, latest,
                       fail_on_data_loss=options.fail_on_data_loss)
