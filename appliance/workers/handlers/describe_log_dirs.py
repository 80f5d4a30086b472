"""DescribeLogDirs v0-4: this worker's log dir (each worker is a broker with one disk) and the
partitions it holds there: size on disk, offset lag (high watermark - log end offset, never
below 0, as Kafka reports the current log; klog has no future logs) and, from v4, the
volume's total and usable bytes.

A null topic list asks for every partition; a named partition this worker does not hold is
left out, as Kafka leaves it out. Needs DESCRIBE on the cluster: refused, v3+ answer
CLUSTER_AUTHORIZATION_FAILED and older versions an empty list, as Kafka does."""

from __future__ import annotations

import os

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import describe_log_dirs as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key


def _volume(path) -> tuple[int, int]:
    """(total, usable) bytes of the volume holding `path`; (-1, -1) when it cannot be read."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return -1, -1
    return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


def _wanted(body) -> dict[str, set[int]] | None:
    if body.topics is None:
        return None
    wanted: dict[str, set[int]] = {}
    for topic in body.topics:
        wanted.setdefault(topic.topic, set()).update(topic.partitions)
    return wanted


def handle(worker: HandlerContext, request):
    if not access.on_cluster(worker, request, Operation.DESCRIBE):
        return api.Response(throttle_time_ms=0,
                            error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), results=[])
    wanted = _wanted(request.body)
    topics: dict[str, list] = {}
    for partition in sorted(worker.partitions, key=lambda p: p.key):
        if wanted is not None and partition.index not in wanted.get(partition.topic, ()):
            continue
        plog = partition.log
        topics.setdefault(partition.topic, []).append(api.DescribeLogDirsPartition(
            partition_index=partition.index, partition_size=plog.size_bytes,
            offset_lag=max(0, plog.high_watermark - plog.log_end_offset),
            is_future_key=False))
    total, usable = _volume(worker.log_dir)
    result = api.DescribeLogDirsResult(
        error_code=0, log_dir=str(os.path.abspath(worker.log_dir)),
        topics=[api.DescribeLogDirsTopic(name=name, partitions=parts)
                for name, parts in topics.items()],
        total_bytes=total, usable_bytes=usable)
    return api.Response(throttle_time_ms=0, error_code=0, results=[result])
