"""Answers a broker would give, built with the codec's own types, for the sans-IO tests."""

from __future__ import annotations

import re

from klog.protocol.apis import fetch, init_producer_id, list_offsets, metadata, produce
from klog.types import TopicPartition


def metadata_answer(topics: dict[str, int], nodes=(0,), leader=lambda t, p: 0, errors=None,
                    epoch=lambda t, p: -1):
    errors = errors or {}
    return metadata.Response(
        brokers=[metadata.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=9000 + n)
                 for n in nodes],
        topics=[metadata.MetadataResponseTopic(name=name, error_code=errors.get(name, 0),
                                               partitions=[] if name in errors else [
            metadata.MetadataResponsePartition(partition_index=p, leader_id=leader(name, p),
                                               leader_epoch=epoch(name, p))
            for p in range(count)]) for name, count in topics.items()])


def pid_answer(producer_id=7, epoch=0, error=0):
    return init_producer_id.Response(error_code=error, producer_id=producer_id,
                                     producer_epoch=epoch)


def produce_answer(request, outcome=lambda batch: (0, 0)):
    """``outcome(batch) -> (error_code, base_offset)`` for each batch of the request."""
    topics: dict[str, list] = {}
    for batch in request.context:
        code, base = outcome(batch)
        topics.setdefault(batch.topic, []).append(produce.PartitionProduceResponse(
            index=batch.partition, error_code=code, base_offset=base, log_append_time_ms=-1,
            log_start_offset=0))
    return produce.Response(responses=[produce.TopicProduceResponse(
        name=name, partition_responses=parts) for name, parts in topics.items()])


def offsets_answer(request, offsets: dict):
    """ListOffsets answer: ``offsets[(topic, partition)] -> offset`` (or an error tuple)."""
    lookup, tps = request.context
    topics: dict[str, list] = {}
    for tp in tps:
        value = offsets[tuple(tp)]
        code, offset = value if isinstance(value, tuple) else (0, value)
        topics.setdefault(tp.topic, []).append(list_offsets.ListOffsetsPartitionResponse(
            partition_index=tp.partition, error_code=code, timestamp=-1, offset=offset))
    return list_offsets.Response(topics=[list_offsets.ListOffsetsTopicResponse(
        name=name, partitions=parts) for name, parts in topics.items()])


def fetch_answer(request, data: dict, hwm=100, error=0):
    """Fetch answer: ``data[(topic, partition)] -> record bytes``."""
    topics: dict[str, list] = {}
    for tp in request.context:
        topics.setdefault(tp.topic, []).append(fetch.PartitionData(
            partition_index=tp.partition, error_code=error, high_watermark=hwm,
            last_stable_offset=hwm, log_start_offset=0, aborted_transactions=None,
            records=data.get(tuple(tp), b"")))
    return fetch.Response(responses=[fetch.FetchableTopicResponse(topic=name, partitions=parts)
                                     for name, parts in topics.items()])


def tps(spec: str) -> list[TopicPartition]:
    """'t0p0 t1p1' -> [TopicPartition('t0', 0), TopicPartition('t1', 1)]"""
    return [TopicPartition(m[1], int(m[2])) for m in re.finditer(r"(\w+?)p(\d+)", spec)]
