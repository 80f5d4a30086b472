"""Metadata (key 3): brokers, topics, partitions and their leaders.

``topics = None`` asks for every topic (v1+); in v0 an empty list means the same. Leader epochs
are -1 throughout klog, which makes every client skip KIP-320 offset validation.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 3


class MetadataRequestTopic(Struct):
    name = Field(STRING)


class MetadataRequest(Message, versions="0-8", flexible="9+"):
    topics = Field(Array(MetadataRequestTopic), nullable="1+")
    allow_auto_topic_creation = Field(BOOL, "4+", default=True)
    include_cluster_authorized_operations = Field(BOOL, "8-10")
    include_topic_authorized_operations = Field(BOOL, "8+")


class MetadataResponseBroker(Struct):
    node_id = Field(INT32)
    host = Field(STRING)
    port = Field(INT32)
    rack = Field(STRING, "1+", nullable="1+")


class MetadataResponsePartition(Struct):
    error_code = Field(INT16)
    partition_index = Field(INT32)
    leader_id = Field(INT32)
    leader_epoch = Field(INT32, "7+", default=-1)
    replica_nodes = Field(Array(INT32))
    isr_nodes = Field(Array(INT32))
    offline_replicas = Field(Array(INT32), "5+")


class MetadataResponseTopic(Struct):
    error_code = Field(INT16)
    name = Field(STRING)
    is_internal = Field(BOOL, "1+")
    partitions = Field(Array(MetadataResponsePartition))
    topic_authorized_operations = Field(INT32, "8+", default=-(2**31))


class MetadataResponse(Message, versions="0-8", flexible="9+"):
    throttle_time_ms = Field(INT32, "3+")
    brokers = Field(Array(MetadataResponseBroker))
    cluster_id = Field(STRING, "2+", nullable="2+")
    controller_id = Field(INT32, "1+", default=-1)
    topics = Field(Array(MetadataResponseTopic))
    cluster_authorized_operations = Field(INT32, "8-10", default=-(2**31))


Request, Response = MetadataRequest, MetadataResponse


def error_response(request: MetadataRequest | None, version: int, code: int) -> MetadataResponse:
    """No brokers; each requested topic carries ``code`` (no topics if all were requested)."""
    names = [t.name for t in (request.topics or [])] if request is not None else []
    return MetadataResponse(topics=[MetadataResponseTopic(error_code=code, name=n) for n in names])
