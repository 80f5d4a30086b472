"""ListOffsets (key 2): the offset for a timestamp (-1 latest, -2 earliest, -3 the record with
the largest timestamp from v7 (KIP-734), -4 the local log start from v8 (KIP-405)) per partition.

v0 (``max_num_offsets``, ``old_style_offsets``) is neither advertised nor declared.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT8, INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 2


class ListOffsetsPartition(Struct):
    partition_index = Field(INT32)
    current_leader_epoch = Field(INT32, "4+", default=-1)
    timestamp = Field(INT64)


class ListOffsetsTopic(Struct):
    name = Field(STRING)
    partitions = Field(Array(ListOffsetsPartition))


class ListOffsetsRequest(Message, versions="1-8", flexible="6+"):
    replica_id = Field(INT32)
    isolation_level = Field(INT8, "2+")
    topics = Field(Array(ListOffsetsTopic))


class ListOffsetsPartitionResponse(Struct):
    partition_index = Field(INT32)
    error_code = Field(INT16)
    timestamp = Field(INT64, "1+", default=-1)
    offset = Field(INT64, "1+", default=-1)
    leader_epoch = Field(INT32, "4+", default=-1)


class ListOffsetsTopicResponse(Struct):
    name = Field(STRING)
    partitions = Field(Array(ListOffsetsPartitionResponse))


class ListOffsetsResponse(Message, versions="1-8", flexible="6+"):
    throttle_time_ms = Field(INT32, "2+")
    topics = Field(Array(ListOffsetsTopicResponse))


Request, Response = ListOffsetsRequest, ListOffsetsResponse


def error_response(
    request: ListOffsetsRequest | None, version: int, code: int
) -> ListOffsetsResponse | None:
    if request is None:
        return None
    return ListOffsetsResponse(topics=[
        ListOffsetsTopicResponse(name=topic.name, partitions=[
            ListOffsetsPartitionResponse(partition_index=part.partition_index, error_code=code)
            for part in topic.partitions
        ])
        for topic in request.topics
    ])  # fmt: skip
