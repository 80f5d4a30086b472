"""Produce (key 0): record batches for partitions; the response gives each one's base offset.

``records`` decodes to a zero-copy memoryview of the request frame. With ``acks = 0`` the client
expects no response at all (:attr:`klog.protocol.server.Request.expects_response`). v10 (KIP-951)
answers a NOT_LEADER_OR_FOLLOWER partition with its `current_leader` and that leader's
`node_endpoints`, so librdkafka retries there without a Metadata round trip. v0-2 are
advertised for old librdkafka's feature detection but not served; they are declared so the
server can still decode them and answer UNSUPPORTED_VERSION per partition.
"""

from __future__ import annotations

from klog.protocol import produce_codec as _produce_codec
from klog.protocol.fieldtypes import INT16, INT32, INT64, RECORDS, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 0


class PartitionProduceData(Struct):
    index = Field(INT32)
    records = Field(RECORDS, nullable="0+")


class TopicProduceData(Struct):
    name = Field(STRING)
    partition_data = Field(Array(PartitionProduceData))


class ProduceRequest(Message, versions="0-10", flexible="9+"):
    transactional_id = Field(STRING, "3+", nullable="3+")
    acks = Field(INT16)
    timeout_ms = Field(INT32)
    topic_data = Field(Array(TopicProduceData))


class BatchIndexAndErrorMessage(Struct):
    batch_index = Field(INT32, "8+")
    batch_index_error_message = Field(STRING, "8+", nullable="8+")


class LeaderIdAndEpoch(Struct):
    """KIP-951: where a NOT_LEADER_OR_FOLLOWER partition's leader is now."""

    leader_id = Field(INT32, "10+", default=-1)
    leader_epoch = Field(INT32, "10+", default=-1)


class PartitionProduceResponse(Struct):
    index = Field(INT32)
    error_code = Field(INT16)
    base_offset = Field(INT64)
    log_append_time_ms = Field(INT64, "2+", default=-1)
    log_start_offset = Field(INT64, "5+", default=-1)
    record_errors = Field(Array(BatchIndexAndErrorMessage), "8+")
    error_message = Field(STRING, "8+", nullable="8+")
    current_leader = Field(LeaderIdAndEpoch, "10+", tag=0)


class TopicProduceResponse(Struct):
    name = Field(STRING)
    partition_responses = Field(Array(PartitionProduceResponse))


class NodeEndpoint(Struct):
    """KIP-951: a leader named in `current_leader`, so the client need not ask Metadata."""

    node_id = Field(INT32, "10+")
    host = Field(STRING, "10+")
    port = Field(INT32, "10+")
    rack = Field(STRING, "10+", nullable="10+", default=None)


class ProduceResponse(Message, versions="0-10", flexible="9+"):
    responses = Field(Array(TopicProduceResponse))
    throttle_time_ms = Field(INT32, "1+", default=0)
    node_endpoints = Field(Array(NodeEndpoint), "10+", tag=0)


Request, Response = ProduceRequest, ProduceResponse


def error_response(
    request: ProduceRequest | None, version: int, code: int
) -> ProduceResponse | None:
    """Every partition of the request fails with ``code``; without a body there is nothing to
    address the error to, so the caller must close the connection."""
    if request is None:
        return None
    return ProduceResponse(responses=[
        TopicProduceResponse(name=topic.name, partition_responses=[
            PartitionProduceResponse(index=part.index, error_code=code, base_offset=-1)
            for part in topic.partition_data
        ])
        for topic in request.topic_data
    ])  # fmt: skip


# v3-10, what every current client sends, have hand-compiled codecs (klog.protocol.produce_codec,
# produce_flex for the flexible v9-10): the interpreted ones above stay the reference they are
# tested against.
_produce_codec.install(ProduceRequest, TopicProduceData, PartitionProduceData, ProduceResponse,
                       TopicProduceResponse, PartitionProduceResponse)
