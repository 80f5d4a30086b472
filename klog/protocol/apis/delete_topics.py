"""DeleteTopics (key 20): admin clients delete topics by name (v6+ by id; not declared)."""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 20


class DeleteTopicsRequest(Message, versions="0-3", flexible="4+"):
    topic_names = Field(Array(STRING), "0-5")
    timeout_ms = Field(INT32)


class DeletableTopicResult(Struct):
    name = Field(STRING)
    error_code = Field(INT16)


class DeleteTopicsResponse(Message, versions="0-3", flexible="4+"):
    throttle_time_ms = Field(INT32, "1+")
    responses = Field(Array(DeletableTopicResult))


Request, Response = DeleteTopicsRequest, DeleteTopicsResponse


def error_response(
    request: DeleteTopicsRequest | None, version: int, code: int
) -> DeleteTopicsResponse | None:
    if request is None:
        return None
    return DeleteTopicsResponse(
        responses=[DeletableTopicResult(name=n, error_code=code) for n in request.topic_names]
    )
