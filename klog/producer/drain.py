"""Which sealed batches go out now, and the Produce requests that carry them. Pure.

Kafka's rules: one Produce per node with at most one batch per partition (a v2 broker takes
exactly one batch per partition per request), no more than ``max_in_flight`` requests per
node, a request no larger than ``max_request_size`` (one oversized batch still goes alone),
nothing for a node or batch still in its retry backoff (a batch whose partition has a newer
leader epoch since it went out skips its own backoff, as KIP-951 asks), and the ordering rules of
`Sequences.can_send` (a retry goes alone; five batches per partition at most). Batches are
stamped when drained and encoded when the request body is built, which the I/O layer does
outside any lock.

Fairness: each request starts its walk over the partitions one further than the last one
(Kafka's drain index), so when full batches fill whole requests (large ``batch_size``, or
many busy partitions) every backlogged partition gets its turn instead of the first ones in
the table taking every request.
"""

from __future__ import annotations

from collections import Counter

from klog.config import ProducerConfig
from klog.metadata import NO_LEADER, ClusterMetadata
from klog.outgoing import Outgoing
from klog.producer.accumulator import Accumulator
from klog.producer.batch import ProducerBatch
from klog.producer.sequences import Sequences
from klog.protocol.apis import produce


def drain(accumulator: Accumulator, cluster: ClusterMetadata, sequences: Sequences,
          in_flight: Counter, backoff: dict[int, int], config: ProducerConfig,
          now_ms: int, allowed: set | None = None) -> list[Outgoing]:
    """Take what may be sent now; ``in_flight`` (requests per node) is updated. ``allowed``
    (a transactional producer's): only these partitions, those already added to the
    transaction with AddPartitionsToTxn; None: every partition."""
    requests = []
    limit = config.max_in_flight_requests_per_connection
    queues = accumulator.queues
    keys = list(queues)
    while True:
        by_node: dict[int, list[ProducerBatch]] = {}
        sizes: Counter[int] = Counter()
        start = accumulator.drain_start % len(keys) if keys else 0
        accumulator.drain_start = start + 1
        for key in keys[start:] + keys[:start] if start else keys:
            queue = queues[key]
            if not queue:
                continue
            if allowed is not None and key not in allowed:
                continue
            batch = queue[0]
            node = cluster.leader_of(*key)
            if node == NO_LEADER:
                cluster.want((key[0],))
                cluster.mark_stale()
                continue
            if (batch.retry_at_ms > now_ms and not _leader_moved(cluster, key, batch)
                    or backoff.get(node, 0) > now_ms
                    or node not in by_node and in_flight[node] >= limit
                    or not sequences.can_send(batch)
                    or sizes[node] + batch.size > config.max_request_size and sizes[node]):
                continue
            accumulator.pop(key)
            sequences.sent(batch)
            batch.leader_epoch = cluster.leader_epoch_of(*key)
            by_node.setdefault(node, []).append(batch)
            sizes[node] += batch.size
        if not by_node:
            return requests
        for node, batches in by_node.items():
            request = produce_request(node, batches, config)
            requests.append(request)
            if request.expect_response:
                in_flight[node] += 1


def _leader_moved(cluster: ClusterMetadata, key: tuple[str, int], batch: ProducerBatch
                  ) -> bool:
    """A retry waits out retry_backoff_ms to spare the leader it failed on; a partition whose
    metadata now names a newer leader epoch than the batch last went out under has another
    leader, which it need not spare (KIP-951: the retry goes at once). Without epochs (an old
    broker) the backoff holds."""
    return 0 <= batch.leader_epoch < cluster.leader_epoch_of(*key)


def produce_request(node: int, batches: list[ProducerBatch], config: ProducerConfig
                    ) -> Outgoing:
    """The Produce for ``batches``; its body (which encodes them) is built on demand."""
    codec = config.codec

    def body():
        topics: dict[str, list] = {}
        for batch in batches:
            topics.setdefault(batch.topic, []).append(produce.PartitionProduceData(
                index=batch.partition, records=batch.encode(codec)))
        return produce.Request(
            transactional_id=config.transactional_id, acks=config.acks,
            timeout_ms=config.request_timeout_ms,
            topic_data=[produce.TopicProduceData(name=name, partition_data=parts)
                        for name, parts in topics.items()])

    return Outgoing(node, produce, body, context=batches, expect_response=config.acks != 0)
