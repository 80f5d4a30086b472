"""Metrics areas: each worker's statistics, published for the supervisor's scrape.

A worker keeps its statistics in plain in-process objects (the hot path adds to Python ints)
and, about twice a second, rewrites its own area with one document: a seqlocked head (pid,
length, time) and an orjson body. One writer per area, no socket per worker, and a scrape
costs the supervisor a copy and a decode per worker, never a round trip. A worker killed
mid-write leaves its area torn: readers get None until its next incarnation writes again.

The document (keys are stable: the supervisor's collector and `klog status` read them)::

    {"requests": [[api_key, version, requests, errors], ...],
     "latency": [[api, acks, [bucket counts...], count, sum_s], ...],    # LATENCY_BUCKETS_S
     "connections": {"opened", "closed", "refused", "idle_closed", "open"},
     "loop_lag_s": float,
     "group_commit": {"batch": [[bucket counts], count, sum],           # BATCH_BUCKETS
                      "sync": [[bucket counts], count, sum_s],          # LATENCY_BUCKETS_S
                      "failures": int},
     "lag": {"updated_ms", "groups": [...]}}     # the consumer-lag report (klog status)

A document larger than the area (a coordinator with very many groups) is published without
its per-partition lag detail, and the worker logs that once.
"""

from __future__ import annotations

import os

import orjson

from . import seqlock
from .layout import (
    METRICS_DOCUMENT_MAX_BYTES,
    METRICS_DOCUMENT_OFFSET,
    METRICS_HEAD,
    SEQ_BYTES,
    Geometry,
)
from .seqlock import TornEntryError

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                     2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class DocumentTooLargeError(ValueError):
    """The document does not fit in a worker's metrics area."""


class MetricsAreas:
    """The metrics areas of one mapped region (``buf``: an mmap, or a bytearray in tests)."""

    def __init__(self, buf, geometry: Geometry, *, timeout_s: float = seqlock.DEFAULT_TIMEOUT_S):
        self._buf = buf
        self.geometry = geometry
        self.timeout_s = timeout_s
        self._repaired: set[tuple[int, int]] = set()

    def publish(self, worker: int, document: dict, now_ms: int) -> None:
        """Worker ``worker`` (the caller) replaces its document. Raises DocumentTooLargeError
        (nothing written) when it does not fit."""
        body = orjson.dumps(document)
        if len(body) > METRICS_DOCUMENT_MAX_BYTES:
            raise DocumentTooLargeError(f"{len(body)} bytes; the area holds "
                                        f"{METRICS_DOCUMENT_MAX_BYTES}")
        area = self.geometry.metrics_area(worker)
        buf = self._buf
        key = (worker, os.getpid())
        if key not in self._repaired:  # a previous incarnation may have died mid-write
            odd = seqlock.begin_repair(buf, area)
            self._repaired.add(key)
        else:
            odd = seqlock.begin(buf, area, "metrics area")
        head = area + SEQ_BYTES
        METRICS_HEAD.pack_into(buf, head, os.getpid(), len(body), now_ms)
        start = area + METRICS_DOCUMENT_OFFSET
        buf[start:start + len(body)] = body
        seqlock.end(buf, area, odd)

    def read(self, worker: int) -> tuple[int, int, dict] | None:
        """(pid, updated_ms, document) of a worker, or None: never written, or torn."""
        area = self.geometry.metrics_area(worker)
        try:
            _, raw = seqlock.read_span(self._buf, area, area + SEQ_BYTES,
                                       area + METRICS_DOCUMENT_OFFSET, "metrics area",
                                       self.timeout_s)
            pid, length, updated_ms = METRICS_HEAD.unpack(raw)
            if not length:
                return None
            start = area + METRICS_DOCUMENT_OFFSET
            seq, body = seqlock.read_span(self._buf, area, area + SEQ_BYTES,
                                          start + length, "metrics area", self.timeout_s)
        except TornEntryError:
            return None
        pid, length2, updated_ms = METRICS_HEAD.unpack_from(body, 0)
        if length2 != length:  # rewritten between our two reads: take the next scrape's
            return None
        try:
            return pid, updated_ms, orjson.loads(body[METRICS_HEAD.size:])
        except orjson.JSONDecodeError:
            return None
