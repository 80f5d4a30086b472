"""ListPartitionReassignments (key 46, KIP-455): the partitions being moved, with their replicas
and the replicas being added and removed. A null topic list asks for every move in flight."""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 46


class ListPartitionReassignmentsTopics(Struct):
    name = Field(STRING)
    partition_indexes = Field(Array(INT32))


class ListPartitionReassignmentsRequest(Message, versions="0", flexible="0+"):
    timeout_ms = Field(INT32, default=60000)
    topics = Field(Array(ListPartitionReassignmentsTopics), nullable="0+", default=None)


class OngoingPartitionReassignment(Struct):
    partition_index = Field(INT32)
    replicas = Field(Array(INT32))
    adding_replicas = Field(Array(INT32))
    removing_replicas = Field(Array(INT32))


class OngoingTopicReassignment(Struct):
    name = Field(STRING)
    partitions = Field(Array(OngoingPartitionReassignment))


class ListPartitionReassignmentsResponse(Message, versions="0", flexible="0+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    topics = Field(Array(OngoingTopicReassignment))


Request, Response = ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse


def error_response(request: object, version: int, code: int,
                   message: str | None = None) -> ListPartitionReassignmentsResponse:
    return ListPartitionReassignmentsResponse(error_code=code, error_message=message, topics=[])
