"""OffsetDelete (key 47, KIP-496): remove a group's committed offsets for some partitions.
Fields from Kafka's OffsetDeleteRequest/Response v0 (not flexible).
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 47


class OffsetDeleteRequestPartition(Struct):
    partition_index = Field(INT32)


class OffsetDeleteRequestTopic(Struct):
    name = Field(STRING)
    partitions = Field(Array(OffsetDeleteRequestPartition))


class OffsetDeleteRequest(Message, versions="0", flexible="none"):
    group_id = Field(STRING)
    topics = Field(Array(OffsetDeleteRequestTopic))


class OffsetDeleteResponsePartition(Struct):
    partition_index = Field(INT32)
    error_code = Field(INT16)


class OffsetDeleteResponseTopic(Struct):
    name = Field(STRING)
    partitions = Field(Array(OffsetDeleteResponsePartition))


class OffsetDeleteResponse(Message, versions="0", flexible="none"):
    error_code = Field(INT16)
    throttle_time_ms = Field(INT32)
    topics = Field(Array(OffsetDeleteResponseTopic))


Request, Response = OffsetDeleteRequest, OffsetDeleteResponse


def error_response(
    request: OffsetDeleteRequest | None, version: int, code: int
) -> OffsetDeleteResponse | None:
    """Kafka answers a group-level error at the top with no topics."""
    if request is None:
        return None
    return OffsetDeleteResponse(error_code=code, throttle_time_ms=0, topics=[])
