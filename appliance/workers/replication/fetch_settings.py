"""A follower's replica fetch settings: Kafka's broker keys, with Kafka's defaults.

- `replica.fetch.max.bytes` (1 MiB): bytes asked of each partition per fetch (a first batch
  larger than it still comes whole, as KIP-74 says);
- `replica.fetch.response.max.bytes` (10 MiB): bytes asked of a whole fetch;
- `replica.fetch.wait.max.ms` (500) and `replica.fetch.min.bytes` (1): the leader holds a
  fetch that finds fewer than min bytes until an append brings them or the wait ends (the
  handler's long poll, woken by the append itself, so an acks=all write is copied at once).

A single partition catching up moves at most `replica.fetch.max.bytes` per round trip, as in
Kafka. A follower below the leader's high watermark sends its next fetch while it appends
what came (fetcher.py): the leader reads and sends the next bytes meanwhile.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Not a setting: perf/bench_replication.py turns pipelining off ("0") to measure the fetcher as
# it was (one fetch in flight) beside it in the same run.
PIPELINE_ENV = "KLOG_REPLICA_FETCH_PIPELINE"


def pipelining_enabled() -> bool:
    return os.environ.get(PIPELINE_ENV, "1") != "0"


@dataclass(frozen=True)
class ReplicaFetchSettings:
    max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes
    response_max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    pipeline: bool = True  # a catching-up follower's next fetch sent before it appends
