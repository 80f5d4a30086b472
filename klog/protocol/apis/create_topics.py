"""CreateTopics (key 19): admin clients create topics (-1 partitions or replication = default)."""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 19


class CreatableReplicaAssignment(Struct):
    partition_index = Field(INT32)
    broker_ids = Field(Array(INT32))


class CreatableTopicConfig(Struct):
    name = Field(STRING)
    value = Field(STRING, nullable="0+")


class CreatableTopic(Struct):
    name = Field(STRING)
    num_partitions = Field(INT32)
    replication_factor = Field(INT16)
    assignments = Field(Array(CreatableReplicaAssignment))
    configs = Field(Array(CreatableTopicConfig))


class CreateTopicsRequest(Message, versions="0-4", flexible="5+"):
    topics = Field(Array(CreatableTopic))
    timeout_ms = Field(INT32, default=60000)
    validate_only = Field(BOOL, "1+", default=False)


class CreatableTopicResult(Struct):
    name = Field(STRING)
    error_code = Field(INT16)
    error_message = Field(STRING, "1+", nullable="0+")


class CreateTopicsResponse(Message, versions="0-4", flexible="5+"):
    throttle_time_ms = Field(INT32, "2+")
    topics = Field(Array(CreatableTopicResult))


Request, Response = CreateTopicsRequest, CreateTopicsResponse


def error_response(
    request: CreateTopicsRequest | None, version: int, code: int
) -> CreateTopicsResponse | None:
    if request is None:
        return None
    return CreateTopicsResponse(
        topics=[CreatableTopicResult(name=t.name, error_code=code) for t in request.topics]
    )
