"""OffsetFetch (key 9): a consumer reads its group's committed positions.

``topics = None`` (v2+) asks for every partition the group has committed. -1 as
``committed_offset`` means nothing is committed. v6 is flexible; v7 adds ``require_stable``
(KIP-447: a partition with offsets pending in an open transaction answers
UNSTABLE_OFFSET_COMMIT, which the client retries). v8+ batches groups; klog stops at v7.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 9


class OffsetFetchRequestTopic(Struct):
    name = Field(STRING, "0-7")
    partition_indexes = Field(Array(INT32), "0-7")


class OffsetFetchRequest(Message, versions="0-7", flexible="6+"):
    group_id = Field(STRING, "0-7")
    topics = Field(Array(OffsetFetchRequestTopic), "0-7", nullable="2-7")
    require_stable = Field(BOOL, "7+", default=False)


class OffsetFetchResponsePartition(Struct):
    partition_index = Field(INT32, "0-7")
    committed_offset = Field(INT64, "0-7")
    committed_leader_epoch = Field(INT32, "5-7", default=-1)
    metadata = Field(STRING, "0-7", nullable="0-7")
    error_code = Field(INT16, "0-7")


class OffsetFetchResponseTopic(Struct):
    name = Field(STRING, "0-7")
    partitions = Field(Array(OffsetFetchResponsePartition), "0-7")


class OffsetFetchResponse(Message, versions="0-7", flexible="6+"):
    throttle_time_ms = Field(INT32, "3+")
    topics = Field(Array(OffsetFetchResponseTopic), "0-7")
    error_code = Field(INT16, "2-7", default=0)


Request, Response = OffsetFetchRequest, OffsetFetchResponse


def error_response(
    request: OffsetFetchRequest | None, version: int, code: int
) -> OffsetFetchResponse | None:
    """v2+ has a top-level error code; v0-1 report it per requested partition."""
    if version >= 2:
        return OffsetFetchResponse(error_code=code)
    if request is None or request.topics is None:
        return None
    return OffsetFetchResponse(topics=[
        OffsetFetchResponseTopic(name=topic.name, partitions=[
            OffsetFetchResponsePartition(partition_index=index, committed_offset=-1,
                                         error_code=code)
            for index in topic.partition_indexes
        ])
        for topic in request.topics
    ])  # fmt: skip
