"""DeleteRecords for klog.Admin: move partitions' log start offsets up, each on its leader.

A partition the metadata does not know answers UNKNOWN_TOPIC_OR_PARTITION without a request,
as Kafka's admin client does; the others go to their leaders in one request per leader. Each
partition's outcome is its new low watermark (the log start) or the KafkaError the broker gave
(OFFSET_OUT_OF_RANGE beyond the high watermark, NOT_LEADER_OR_FOLLOWER, ...): one partition's
error does not hide the others' results.
"""

from __future__ import annotations

from klog.errors import KafkaError, error_for
from klog.protocol.apis import delete_records
from klog.protocol.error_codes import ErrorCode
from klog.types import TopicPartition

HIGH_WATERMARK = -1  # delete everything below the high watermark


def delete_records_before(admin, offsets: dict[TopicPartition, int], *,
                          timeout_ms: int) -> dict[TopicPartition, int | KafkaError]:
    """See :meth:`klog.admin.Admin.delete_records`."""
    topics = sorted({tp.topic for tp in offsets})
    answer = admin._metadata(topics)
    leaders = {(t.name, p.partition_index): p.leader_id
               for t in answer.topics if t.error_code == ErrorCode.NONE for p in t.partitions}
    results: dict[TopicPartition, int | KafkaError] = {}
    by_leader: dict[int, dict[str, list[delete_records.DeleteRecordsPartition]]] = {}
    for tp, offset in offsets.items():
        leader = leaders.get((tp.topic, tp.partition))
        if leader is None:
            results[tp] = error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, topic=tp.topic,
                                    partition=tp.partition)
            continue
        by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(
            delete_records.DeleteRecordsPartition(partition_index=tp.partition, offset=offset))
    for leader, topics_of in by_leader.items():
        try:
            conn = admin._leader_connection(leader, answer.brokers)
        except KafkaError as exc:
            results.update({TopicPartition(t, p.partition_index): exc
                            for t, parts in topics_of.items() for p in parts})
            continue
        reply = conn.call(delete_records, timeout_ms=timeout_ms, topics=[
            delete_records.DeleteRecordsTopic(name=t, partitions=parts)
            for t, parts in topics_of.items()])
        for t in reply.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                results[tp] = p.low_watermark if p.error_code == ErrorCode.NONE else error_for(
                    p.error_code, topic=t.name, partition=p.partition_index,
                    broker=conn.address)
    return {tp: results[tp] for tp in offsets}
