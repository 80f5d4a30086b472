"""OffsetForLeaderEpoch (key 23): the end offset of a leader epoch in a partition's log.

A follower asks its leader, before it fetches, where the latest epoch it holds ends in the
leader's log, and truncates its own log there (KIP-101; KIP-279 answers the largest epoch
the leader knows that is not above the one asked for, so divergent epochs are found in one
round). v2 adds `current_leader_epoch` (KIP-320 fencing); v3 the asking `replica_id`.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 23


class OffsetForLeaderPartition(Struct):
    partition = Field(INT32)
    current_leader_epoch = Field(INT32, "2+", default=-1)
    leader_epoch = Field(INT32)


class OffsetForLeaderTopic(Struct):
    topic = Field(STRING)
    partitions = Field(Array(OffsetForLeaderPartition))


class OffsetForLeaderEpochRequest(Message, versions="2-3", flexible="4+"):
    replica_id = Field(INT32, "3+", default=-2)
    topics = Field(Array(OffsetForLeaderTopic))


class EpochEndOffset(Struct):
    error_code = Field(INT16)
    partition = Field(INT32)
    leader_epoch = Field(INT32, "1+", default=-1)
    end_offset = Field(INT64, default=-1)


class OffsetForLeaderTopicResult(Struct):
    topic = Field(STRING)
    partitions = Field(Array(EpochEndOffset))


class OffsetForLeaderEpochResponse(Message, versions="2-3", flexible="4+"):
    throttle_time_ms = Field(INT32, "2+")
    topics = Field(Array(OffsetForLeaderTopicResult))


Request, Response = OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse


def error_response(
    request: OffsetForLeaderEpochRequest | None, version: int, code: int
) -> OffsetForLeaderEpochResponse | None:
    if request is None:
        return None
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=[
        OffsetForLeaderTopicResult(topic=topic.topic, partitions=[
            EpochEndOffset(error_code=code, partition=part.partition, leader_epoch=-1,
                           end_offset=-1)
            for part in topic.partitions
        ])
        for topic in request.topics
    ])  # fmt: skip
