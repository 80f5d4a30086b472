"""ElectLeaders (key 43, KIP-460): elect the preferred replica (type 0) or, for a partition
without a live in-sync replica, any live replica (type 1, unclean) as leader. v1 adds the
election type and a top-level error; v2 is flexible (librdkafka and kafka-python send v2).
A null partition list means every partition."""

from __future__ import annotations

from klog.protocol.fieldtypes import INT8, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 43
PREFERRED, UNCLEAN = 0, 1  # ElectionType


class TopicPartitions(Struct):
    topic = Field(STRING)
    partitions = Field(Array(INT32))


class ElectLeadersRequest(Message, versions="0-2", flexible="2+"):
    election_type = Field(INT8, "1+", default=PREFERRED)
    topic_partitions = Field(Array(TopicPartitions), nullable="0+")
    timeout_ms = Field(INT32, default=60000)


class PartitionResult(Struct):
    partition_id = Field(INT32)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)


class ReplicaElectionResult(Struct):
    topic = Field(STRING)
    partition_result = Field(Array(PartitionResult))


class ElectLeadersResponse(Message, versions="0-2", flexible="2+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16, "1+")
    replica_election_results = Field(Array(ReplicaElectionResult))


Request, Response = ElectLeadersRequest, ElectLeadersResponse


def error_response(request: ElectLeadersRequest | None, version: int, code: int,
                   message: str | None = None) -> ElectLeadersResponse:
    """Every partition asked for carries `code` (v0 has no top-level error)."""
    results = []
    for topic in (getattr(request, "topic_partitions", None) or []):
        results.append(ReplicaElectionResult(topic=topic.topic, partition_result=[
            PartitionResult(partition_id=p, error_code=code, error_message=message)
            for p in topic.partitions]))
    return ElectLeadersResponse(error_code=code if version >= 1 else 0,
                                replica_election_results=results)
