"""DescribeLogDirs (key 35, KIP-113): each log dir of the broker answering, with its partitions'
sizes and offset lag; v3 adds a top-level error, v4 the volume's total and usable bytes
(KIP-827). kafka-python's `describe_log_dirs` sends it to each broker; a null topic list asks
for every partition. v0 is deprecated, and kept for the old clients that send it."""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 35


class DescribableLogDirTopic(Struct):
    topic = Field(STRING)
    partitions = Field(Array(INT32))


class DescribeLogDirsRequest(Message, versions="0-4", flexible="2+"):
    topics = Field(Array(DescribableLogDirTopic), nullable="0+")


class DescribeLogDirsPartition(Struct):
    partition_index = Field(INT32)
    partition_size = Field(INT64)
    offset_lag = Field(INT64)
    is_future_key = Field(BOOL)


class DescribeLogDirsTopic(Struct):
    name = Field(STRING)
    partitions = Field(Array(DescribeLogDirsPartition))


class DescribeLogDirsResult(Struct):
    error_code = Field(INT16)
    log_dir = Field(STRING)
    topics = Field(Array(DescribeLogDirsTopic))
    total_bytes = Field(INT64, "4+", default=-1)
    usable_bytes = Field(INT64, "4+", default=-1)


class DescribeLogDirsResponse(Message, versions="0-4", flexible="2+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16, "3+")
    results = Field(Array(DescribeLogDirsResult))


Request, Response = DescribeLogDirsRequest, DescribeLogDirsResponse


def error_response(request: object, version: int, code: int) -> DescribeLogDirsResponse:
    """Before v3 there is no top-level error: the answer is an empty list, as Kafka's."""
    return DescribeLogDirsResponse(error_code=code if version >= 3 else 0, results=[])
