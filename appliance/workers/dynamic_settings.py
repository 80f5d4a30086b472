"""A worker's effective settings: its static configuration under the brokers' dynamic configs
(`appliance.dynamic_broker`), applied whenever either changes.

What changes at once: the topic defaults every log without an override follows (live logs
are reconfigured: retention, segment size and roll, cleanup policy, cleaner ratios and lags),
and the log cleaner's rate limit, backoff and buffer sizes. `log.cleaner.threads` waits for
the worker's next start (its pool is made then).
"""

from __future__ import annotations

import dataclasses
import logging

from appliance import dynamic_broker

log = logging.getLogger(__name__)


class DynamicSettings:
    def __init__(self, worker):
        self.worker = worker
        self.static = worker.config  # what the file (and SIGHUP reloads) say

    def follow(self) -> None:
        self.worker.control.add_dynamic_config_listener(lambda entities: self.apply())
        self.apply()

    def reloaded(self, static) -> None:
        self.static = static
        self.apply()

    def apply(self) -> None:
        worker = self.worker
        layers = dynamic_broker.node_layers(worker.control.dynamic_configs, worker.node_id)
        try:
            config = dynamic_broker.effective(self.static, layers)
        except ValueError as exc:  # checked before stored; a hand-edited store may not be
            log.error("dynamic broker configs not applied: %s", exc)
            config = self.static
        worker.config = config
        worker.control.defaults = config.log_defaults
        worker.partitions.defaults = config.log_defaults
        worker.partitions.reconfigure(worker.control.topics())  # only logs that differ
        _apply_cleaner(worker.cleaner, config)


def _apply_cleaner(cleaner, config) -> None:
    cleaner.backoff_s = config.log_cleaner_backoff_ms / 1000
    throttle = cleaner.settings.throttle
    if throttle is not None and hasattr(throttle, "rate"):
        throttle.rate = config.log_cleaner_io_max_bytes_per_second
    cleaner.settings = dataclasses.replace(
        cleaner.settings,
        dedupe_buffer_bytes=config.log_cleaner_dedupe_buffer_size // max(1, cleaner.threads),
        io_buffer_bytes=config.log_cleaner_io_buffer_size)
