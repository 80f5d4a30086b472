"""CreatePartitions (key 37): admin clients raise a topic's partition count.

``count`` is the new total, not the number to add. ``assignments`` (one replica list per new
partition) is null when the controller should place them, which is what every client sends
unless its user wrote a manual assignment.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 37


class CreatePartitionsAssignment(Struct):
    broker_ids = Field(Array(INT32))


class CreatePartitionsTopic(Struct):
    name = Field(STRING)
    count = Field(INT32)
    assignments = Field(Array(CreatePartitionsAssignment), nullable="0+")


class CreatePartitionsRequest(Message, versions="0-1", flexible="2+"):
    topics = Field(Array(CreatePartitionsTopic))
    timeout_ms = Field(INT32)
    validate_only = Field(BOOL)


class CreatePartitionsTopicResult(Struct):
    name = Field(STRING)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)


class CreatePartitionsResponse(Message, versions="0-1", flexible="2+"):
    throttle_time_ms = Field(INT32)
    results = Field(Array(CreatePartitionsTopicResult))


Request, Response = CreatePartitionsRequest, CreatePartitionsResponse


def error_response(
    request: CreatePartitionsRequest | None, version: int, code: int
) -> CreatePartitionsResponse | None:
    if request is None:
        return None
    return CreatePartitionsResponse(
        throttle_time_ms=0,
        results=[CreatePartitionsTopicResult(name=t.name, error_code=code)
                 for t in request.topics])
