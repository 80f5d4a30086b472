"""Prometheus metrics of an appliance: the supervisor's collector and HTTP endpoint.

Workers never serve metrics: they publish their statistics in their shm metrics areas
(`appliance.shm.metrics_area`), and `collector.ApplianceCollector` reads those, the partition
directory and the supervisor's own facts at scrape time. Every name is listed, with its
meaning, in `collector.METRICS` (and the README).
"""
