"""OffsetCommit (key 8): a consumer stores its position per partition in a group.

``generation_id_or_member_epoch = -1`` with an empty ``member_id`` is a "simple" commit from an
assign() consumer, accepted without group membership. v0-1 are advertised, not served.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 8


class OffsetCommitRequestPartition(Struct):
    partition_index = Field(INT32)
    committed_offset = Field(INT64)
    committed_leader_epoch = Field(INT32, "6+", default=-1)
    commit_timestamp = Field(INT64, "1", default=-1)
    committed_metadata = Field(STRING, nullable="0+")


class OffsetCommitRequestTopic(Struct):
    name = Field(STRING)
    partitions = Field(Array(OffsetCommitRequestPartition))


class OffsetCommitRequest(Message, versions="0-7", flexible="8+"):
    group_id = Field(STRING)
    generation_id_or_member_epoch = Field(INT32, "1+", default=-1)
    member_id = Field(STRING, "1+")
    group_instance_id = Field(STRING, "7+", nullable="7+")
    retention_time_ms = Field(INT64, "2-4", default=-1)
    topics = Field(Array(OffsetCommitRequestTopic))


class OffsetCommitResponsePartition(Struct):
    partition_index = Field(INT32)
    error_code = Field(INT16)


class OffsetCommitResponseTopic(Struct):
    name = Field(STRING)
    partitions = Field(Array(OffsetCommitResponsePartition))


class OffsetCommitResponse(Message, versions="0-7", flexible="8+"):
    throttle_time_ms = Field(INT32, "3+")
    topics = Field(Array(OffsetCommitResponseTopic))


Request, Response = OffsetCommitRequest, OffsetCommitResponse


def error_response(
    request: OffsetCommitRequest | None, version: int, code: int
) -> OffsetCommitResponse | None:
    if request is None:
        return None
    return OffsetCommitResponse(topics=[
        OffsetCommitResponseTopic(name=topic.name, partitions=[
            OffsetCommitResponsePartition(partition_index=part.partition_index, error_code=code)
            for part in topic.partitions
        ])
        for topic in request.topics
    ])  # fmt: skip
