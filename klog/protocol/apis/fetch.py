"""Fetch (key 1): record bytes from a position in each partition, long-polled.

The response's ``records`` accepts a :class:`~klog.protocol.chunks.FileRegion` (or a list of
regions and byte strings), which the encoder passes through so the worker can ``sendfile`` it
from the segment. Fetch sessions (KIP-227, ``session_id``/``session_epoch``/
``forgotten_topics_data``) are the appliance's to keep or decline: it keeps them for its
followers, and answers a consumer ``session_id = 0``. v0-3 are advertised, not served. v12
(flexible) answers a partition this node does not lead with KIP-951's `current_leader`; v13+
(topic ids) is not served: librdkafka falls back to v12 without them.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT8, INT16, INT32, INT64, RECORDS, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 1


class FetchPartition(Struct):
    partition = Field(INT32)
    current_leader_epoch = Field(INT32, "9+", default=-1)
    fetch_offset = Field(INT64)
    last_fetched_epoch = Field(INT32, "12+", default=-1)
    log_start_offset = Field(INT64, "5+", default=-1)
    partition_max_bytes = Field(INT32)


class FetchTopic(Struct):
    topic = Field(STRING, "0-12")
    partitions = Field(Array(FetchPartition))


class ForgottenTopic(Struct):
    topic = Field(STRING, "7-12")
    partitions = Field(Array(INT32), "7+")


class FetchRequest(Message, versions="0-12", flexible="12+"):
    cluster_id = Field(STRING, "12+", nullable="12+", default=None, tag=0)
    replica_id = Field(INT32, "0-14", default=-1)
    max_wait_ms = Field(INT32)
    min_bytes = Field(INT32)
    max_bytes = Field(INT32, "3+", default=0x7FFFFFFF)
    isolation_level = Field(INT8, "4+", default=0)
    session_id = Field(INT32, "7+", default=0)
    session_epoch = Field(INT32, "7+", default=-1)
    topics = Field(Array(FetchTopic))
    forgotten_topics_data = Field(Array(ForgottenTopic), "7+")
    rack_id = Field(STRING, "11+", default="")


class AbortedTransaction(Struct):
    producer_id = Field(INT64, "4+")
    first_offset = Field(INT64, "4+")


class EpochEndOffset(Struct):
    epoch = Field(INT32, "12+", default=-1)
    end_offset = Field(INT64, "12+", default=-1)


class LeaderIdAndEpoch(Struct):
    """KIP-951: where a NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH partition's leader is."""

    leader_id = Field(INT32, "12+", default=-1)
    leader_epoch = Field(INT32, "12+", default=-1)


class SnapshotId(Struct):
    end_offset = Field(INT64, "0+", default=-1)
    epoch = Field(INT32, "0+", default=-1)


class PartitionData(Struct):
    partition_index = Field(INT32)
    error_code = Field(INT16)
    high_watermark = Field(INT64)
    last_stable_offset = Field(INT64, "4+", default=-1)
    log_start_offset = Field(INT64, "5+", default=-1)
    diverging_epoch = Field(EpochEndOffset, "12+", tag=0)
    current_leader = Field(LeaderIdAndEpoch, "12+", tag=1)
    snapshot_id = Field(SnapshotId, "12+", tag=2)
    aborted_transactions = Field(Array(AbortedTransaction), "4+", nullable="4+")
    preferred_read_replica = Field(INT32, "11+", default=-1)
    records = Field(RECORDS, nullable="0+")


class FetchableTopicResponse(Struct):
    topic = Field(STRING, "0-12")
    partitions = Field(Array(PartitionData))


class FetchResponse(Message, versions="0-12", flexible="12+"):
    throttle_time_ms = Field(INT32, "1+")
    error_code = Field(INT16, "7+")
    session_id = Field(INT32, "7+", default=0)
    responses = Field(Array(FetchableTopicResponse))


Request, Response = FetchRequest, FetchResponse

# KIP-227's session epochs: -1 asks for no session (closing a named one), 0 opens one, and
# a session's incremental requests count up from 1 (after 2**31 - 1 comes 1 again)
FINAL_SESSION_EPOCH = -1
INITIAL_SESSION_EPOCH = 0


def next_session_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


def error_response(request: FetchRequest | None, version: int, code: int) -> FetchResponse | None:
    """v7+ has a top-level error code; before that each requested partition carries it."""
    if version >= 7:
        return FetchResponse(error_code=code)
    if request is None:
        return None
    return FetchResponse(responses=[
        FetchableTopicResponse(topic=topic.topic, partitions=[
            PartitionData(partition_index=part.partition, error_code=code, high_watermark=-1)
            for part in topic.partitions
        ])
        for topic in request.topics
    ])  # fmt: skip
