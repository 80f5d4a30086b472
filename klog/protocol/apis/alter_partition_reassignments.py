"""AlterPartitionReassignments (key 45, KIP-455): move partitions to new replica lists, or
cancel a move in flight (a null replica list). kafka-python sends it (its bundled schema goes
to v1, which adds AllowReplicationFactorChange; we serve v0, so it sends v0); librdkafka has
no call that sends it."""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 45


class ReassignablePartition(Struct):
    partition_index = Field(INT32)
    replicas = Field(Array(INT32), nullable="0+", default=None)


class ReassignableTopic(Struct):
    name = Field(STRING)
    partitions = Field(Array(ReassignablePartition))


class AlterPartitionReassignmentsRequest(Message, versions="0", flexible="0+"):
    timeout_ms = Field(INT32, default=60000)
    topics = Field(Array(ReassignableTopic))


class ReassignablePartitionResponse(Struct):
    partition_index = Field(INT32)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)


class ReassignableTopicResponse(Struct):
    name = Field(STRING)
    partitions = Field(Array(ReassignablePartitionResponse))


class AlterPartitionReassignmentsResponse(Message, versions="0", flexible="0+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    responses = Field(Array(ReassignableTopicResponse))


Request, Response = AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse


def error_response(request: object, version: int, code: int,
                   message: str | None = None) -> AlterPartitionReassignmentsResponse:
    return AlterPartitionReassignmentsResponse(error_code=code, error_message=message,
                                               responses=[])
