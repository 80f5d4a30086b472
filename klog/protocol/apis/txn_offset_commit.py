"""TxnOffsetCommit (key 28): a transactional producer commits a group's offsets inside its
transaction (KIP-98); the group coordinator holds them pending until the transaction's marker.

v3 (KIP-447) adds the consumer's generation, member id and instance id, so a zombie member
of the group is fenced; it is also the first flexible version. v4 (KIP-890) is not declared.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 28


class TxnOffsetCommitRequestPartition(Struct):
    partition_index = Field(INT32)
    committed_offset = Field(INT64)
    committed_leader_epoch = Field(INT32, "2+", default=-1)
    committed_metadata = Field(STRING, nullable="0+")


class TxnOffsetCommitRequestTopic(Struct):
    name = Field(STRING)
    partitions = Field(Array(TxnOffsetCommitRequestPartition))


class TxnOffsetCommitRequest(Message, versions="0-3", flexible="3+"):
    transactional_id = Field(STRING)
    group_id = Field(STRING)
    producer_id = Field(INT64)
    producer_epoch = Field(INT16)
    generation_id = Field(INT32, "3+", default=-1)
    member_id = Field(STRING, "3+", default="")
    group_instance_id = Field(STRING, "3+", nullable="3+", default=None)
    topics = Field(Array(TxnOffsetCommitRequestTopic))


class TxnOffsetCommitResponsePartition(Struct):
    partition_index = Field(INT32)
    error_code = Field(INT16)


class TxnOffsetCommitResponseTopic(Struct):
    name = Field(STRING)
    partitions = Field(Array(TxnOffsetCommitResponsePartition))


class TxnOffsetCommitResponse(Message, versions="0-3", flexible="3+"):
    throttle_time_ms = Field(INT32)
    topics = Field(Array(TxnOffsetCommitResponseTopic))


Request, Response = TxnOffsetCommitRequest, TxnOffsetCommitResponse


def error_response(
    request: TxnOffsetCommitRequest | None, version: int, code: int
) -> TxnOffsetCommitResponse | None:
    """Every partition of the request carries the error; without the request, no answer."""
    if request is None:
        return None
    return TxnOffsetCommitResponse(topics=[
        TxnOffsetCommitResponseTopic(name=topic.name, partitions=[
            TxnOffsetCommitResponsePartition(partition_index=part.partition_index,
                                             error_code=code)
            for part in topic.partitions
        ])
        for topic in request.topics
    ])  # fmt: skip
