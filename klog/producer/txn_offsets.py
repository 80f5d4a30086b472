"""TxnOffsetCommit (key 28) as the transactional producer sends it (KIP-447): the consumer's
offsets, committed inside the transaction at the group's coordinator, with the consumer's
generation, member id and group instance id so that a zombie of an old generation is
refused (ILLEGAL_GENERATION, FENCED_INSTANCE_ID). Pure.

The API's declaration lives in `klog.protocol.apis.txn_offset_commit`; the nested structs are
found through the declared fields, so only Kafka's field names are assumed here.
"""

from __future__ import annotations

from klog.protocol.error_codes import ErrorCode


def _api():
    try:
        from klog.protocol.apis import txn_offset_commit
    except ImportError:  # pragma: no cover - a client without the declaration
        from klog.errors import UnsupportedVersionError

        raise UnsupportedVersionError(ErrorCode.UNSUPPORTED_VERSION,
                                      "this klog has no TxnOffsetCommit declaration") from None
    return txn_offset_commit


def _item(cls, name: str):
    field = next(f for f in cls.fields if f.name == name)
    return field.type.item.cls


def txn_offset_commit_request(transactional_id: str, producer_id: int, producer_epoch: int,
                              group, offsets: dict):
    """``(api module, request)``; ``offsets``: {(topic, partition): (offset, leader epoch,
    metadata)}; ``group``: a ConsumerGroupMetadata."""
    api = _api()
    topic_cls = _item(api.Request, "topics")
    partition_cls = _item(topic_cls, "partitions")
    topics: dict[str, list] = {}
    for (topic, partition), (offset, epoch, metadata) in sorted(offsets.items()):
        topics.setdefault(topic, []).append(partition_cls(
            partition_index=partition, committed_offset=offset,
            committed_leader_epoch=-1 if epoch is None else epoch,
            committed_metadata=metadata))
    body = api.Request(
        transactional_id=transactional_id, group_id=group.group_id, producer_id=producer_id,
        producer_epoch=producer_epoch, generation_id=group.generation_id,
        member_id=group.member_id, group_instance_id=group.group_instance_id,
        topics=[topic_cls(name=name, partitions=parts) for name, parts in topics.items()])
    return api, body


def txn_offset_commit_errors(response) -> list[ErrorCode]:
    """Every partition's error code (NONE where it was taken)."""
    return [ErrorCode(part.error_code) for topic in response.topics
            for part in topic.partitions] or [ErrorCode.NONE]
