"""DeleteRecords (key 21): move partitions' log start offsets up (admin tools' "delete records
before an offset"). Fields from Kafka's DeleteRecordsRequest/Response v0-2 (flexible from v2).
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 21


class DeleteRecordsPartition(Struct):
    partition_index = Field(INT32)
    offset = Field(INT64)


class DeleteRecordsTopic(Struct):
    name = Field(STRING)
    partitions = Field(Array(DeleteRecordsPartition))


class DeleteRecordsRequest(Message, versions="0-2", flexible="2+"):
    topics = Field(Array(DeleteRecordsTopic))
    timeout_ms = Field(INT32)


class DeleteRecordsPartitionResult(Struct):
    partition_index = Field(INT32)
    low_watermark = Field(INT64)
    error_code = Field(INT16)


class DeleteRecordsTopicResult(Struct):
    name = Field(STRING)
    partitions = Field(Array(DeleteRecordsPartitionResult))


class DeleteRecordsResponse(Message, versions="0-2", flexible="2+"):
    throttle_time_ms = Field(INT32)
    topics = Field(Array(DeleteRecordsTopicResult))


Request, Response = DeleteRecordsRequest, DeleteRecordsResponse


def error_response(
    request: DeleteRecordsRequest | None, version: int, code: int
) -> DeleteRecordsResponse | None:
    if request is None:
        return None
    return DeleteRecordsResponse(throttle_time_ms=0, topics=[
        DeleteRecordsTopicResult(name=topic.name, partitions=[
            DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1,
                                         error_code=code)
            for p in topic.partitions])
        for topic in request.topics])
