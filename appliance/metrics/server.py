"""The metrics endpoint: prometheus_client's HTTP server in a thread of the supervisor.

A thread in the supervisor makes forking unsafe (STYLE and `appliance.forking`), so with
`metrics.port` set the supervisor forks its workers through the fork server, started before
this thread, exactly as in cluster mode. The endpoint listens on `metrics.host` (127.0.0.1
unless configured) and serves only this appliance's collector (no process or GC metrics of
the supervisor's interpreter, which say nothing about the appliance).
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, start_http_server

from appliance.metrics.collector import ApplianceCollector

log = logging.getLogger(__name__)


class MetricsEndpoint:
    def __init__(self, region, *, host: str, port: int, heartbeat_timeout_ms: int, fleet=None):
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = ApplianceCollector(region, heartbeat_timeout_ms=heartbeat_timeout_ms,
                                            fleet=fleet)
        self.registry.register(self.collector)
        self.host, self.port = host, port
        self._server = self._thread = None

    def start(self) -> None:
        """Raises OSError when the port cannot be bound (the supervisor stops, naming it)."""
        self._server, self._thread = start_http_server(self.port, self.host, self.registry)
        log.info("serving Prometheus metrics on http://%s:%d/metrics", self.host, self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
