"""TxnOffsetCommit (key 28) as the transactional producer sends it (KIP-447): the consumer's
offsets, committed inside the transaction at the group's coordinator, with the consumer's
generation, member id and group instance id so that a zombie of an old generation is
refused (ILLEGAL_GENERATION, FENCED_INSTANCE_ID). Pure.
"""

from __future__ import annotations

from klog.protocol.apis import txn_offset_commit
from klog.protocol.error_codes import ErrorCode


def txn_offset_commit_request(transactional_id: str, producer_id: int, producer_epoch: int,
                              group, offsets: dict):
    """``(api module, request)``; ``offsets``: {(topic, partition): (offset, leader epoch,
    metadata)}; ``group``: a ConsumerGroupMetadata."""
    topics: dict[str, list] = {}
    for (topic, partition), (offset, epoch, metadata) in sorted(offsets.items()):
        topics.setdefault(topic, []).append(txn_offset_commit.TxnOffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset,
            committed_leader_epoch=-1 if epoch is None else epoch,
            committed_metadata=metadata))
    body = txn_offset_commit.Request(
        transactional_id=transactional_id, group_id=group.group_id, producer_id=producer_id,
        producer_epoch=producer_epoch, generation_id=group.generation_id,
        member_id=group.member_id, group_instance_id=group.group_instance_id,
        topics=[txn_offset_commit.TxnOffsetCommitRequestTopic(name=name, partitions=parts)
                for name, parts in topics.items()])
    return txn_offset_commit, body


def txn_offset_commit_errors(response) -> list[ErrorCode]:
    """Every partition's error code (NONE where it was taken)."""
    return [ErrorCode(part.error_code) for topic in response.topics
            for part in topic.partitions] or [ErrorCode.NONE]
