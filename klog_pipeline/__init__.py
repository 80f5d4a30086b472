"""The data pipeline: klog's offline half, after the paper's hourly loads into Hadoop.

Two layers, each usable alone:

- ``klog_pipeline.source``: a PySpark data source named ``klog`` (Spark's Python Data Source API),
  batch and streaming, with the options and the output schema of Spark's own Kafka source.
  Executors read with the klog client and hand Spark Arrow record batches.
- ``klog_pipeline.loader``: the hourly loader on top of it. For hour H it reads exactly H's records
  from every partition, parses the JSON log lines (orjson), writes Parquet under
  ``dt=YYYY-MM-DD/hour=HH``, publishes the hour atomically and records its offset ranges in a
  ledger, so reruns neither duplicate nor drop a record. ``klog load-hourly`` and the
  spark-submit job file ``klog_pipeline/job.py`` drive it.

Rules: pyspark is imported only here (never by the client or the appliance); this package
imports the klog client and nothing of the appliance or the command line. Importing
``klog_pipeline`` itself is cheap: the modules that need pyspark import it themselves.
"""
