"""WriteTxnMarkers (key 27, KIP-98): the transaction coordinator asks each partition leader to
write a COMMIT or ABORT control batch for one producer's transaction. Broker to broker only
(ClusterAction); v1 is the flexible form.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 27


class WritableTxnMarkerTopic(Struct):
    name = Field(STRING)
    partition_indexes = Field(Array(INT32))


class WritableTxnMarker(Struct):
    producer_id = Field(INT64)
    producer_epoch = Field(INT16)
    transaction_result = Field(BOOL)
    topics = Field(Array(WritableTxnMarkerTopic))
    coordinator_epoch = Field(INT32)


class WriteTxnMarkersRequest(Message, versions="0-1", flexible="1+"):
    markers = Field(Array(WritableTxnMarker))


class WritableTxnMarkerPartitionResult(Struct):
    partition_index = Field(INT32)
    error_code = Field(INT16)


class WritableTxnMarkerTopicResult(Struct):
    name = Field(STRING)
    partitions = Field(Array(WritableTxnMarkerPartitionResult))


class WritableTxnMarkerResult(Struct):
    producer_id = Field(INT64)
    topics = Field(Array(WritableTxnMarkerTopicResult))


class WriteTxnMarkersResponse(Message, versions="0-1", flexible="1+"):
    markers = Field(Array(WritableTxnMarkerResult))


Request, Response = WriteTxnMarkersRequest, WriteTxnMarkersResponse


def error_response(request: WriteTxnMarkersRequest | None, version: int,
                   code: int) -> WriteTxnMarkersResponse | None:
    """`code` for every partition the request names (none to name: no answer can carry it)."""
    if request is None:
        return None
    return WriteTxnMarkersResponse(markers=[
        WritableTxnMarkerResult(producer_id=marker.producer_id, topics=[
            WritableTxnMarkerTopicResult(name=topic.name, partitions=[
                WritableTxnMarkerPartitionResult(partition_index=index, error_code=code)
                for index in topic.partition_indexes])
            for topic in marker.topics])
        for marker in request.markers])
