"""The Produce side of KIP-890's first part: which batches of a transactional Produce must be
verified with the coordinator before they are appended, and what each partition is answered.

Per batch, never per record: only the first batch header of each partition is read, and only
for a request that names a transactional id (a plain or idempotent produce pays nothing). A
batch needs verification when it would start its producer's transaction on the partition
(`ProducerStates.needs_verification`); it then gets a guard (`start_verification`) that its
append must present, and the coordinator is asked once per request and producer for all such
partitions (`TxnVerifier.verify`), asynchronously: the worker serves everyone else meanwhile.
A refused batch is logged, one line each, and never appended.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from appliance.workers.transactions.verification import RETRIABLE, produce_error
from klog.protocol.error_codes import ErrorCode
from klog.protocol.record_batch import HEADER_BYTES, read_header

log = logging.getLogger(__name__)


@dataclass
class Checks:
    """What the appends of one Produce request need: the guard each partition presents
    (``default``: False when verification is off, else None, nothing verified) and the
    partitions refused before any append, with their answer."""

    default: object = None
    guards: dict = field(default_factory=dict)
    refused: dict[tuple[str, int], tuple[ErrorCode, str | None]] = field(default_factory=dict)

    def guard(self, key: tuple[str, int]):
        return self.guards.get(key, self.default)


@dataclass(frozen=True)
class _Pending:
    partition: object
    header: object
    guard: object


def to_verify(worker, body, skipped) -> dict[tuple[str, int], _Pending]:
    """The partitions of a transactional Produce whose first batch must be verified
    (``skipped``: topic names refused already)."""
    pending = {}
    for topic_data in body.topic_data:
        if topic_data.name in skipped:
            continue
        for data in topic_data.partition_data:
            records = data.records
            if records is None or len(records) < HEADER_BYTES:
                continue
            header = read_header(records)
            if not header.is_transactional:
                continue
            partition = worker.partitions.get(topic_data.name, data.index)
            if partition is None or not worker.leads(topic_data.name, data.index):
                continue
            if partition.producers.needs_verification(header):
                pending[(topic_data.name, data.index)] = _Pending(
                    partition, header, partition.producers.start_verification(header))
    return pending


async def verify(worker, transactional_id: str, pending: dict) -> Checks:
    """Ask the coordinator (once per producer id and epoch in the request: one, from any
    real client) and say what each partition presents or is answered."""
    by_producer: dict[tuple[int, int], list] = {}
    for key, item in pending.items():
        by_producer.setdefault((item.header.producer_id, item.header.producer_epoch),
                               []).append(key)
    verifier = worker.transactions.verifier
    answers = await asyncio.gather(*[
        verifier.verify(transactional_id, producer_id, epoch, keys)
        for (producer_id, epoch), keys in by_producer.items()])
    checks = Checks()
    for errors in answers:
        for key, code in errors.items():
            item = pending[key]
            checks.refused[key] = produce_error(code)
            if code not in RETRIABLE:  # refused for good: a retry starts afresh
                item.partition.producers.end_verification(item.header.producer_id, item.guard)
            log.warning("%s-%d: transactional batch of producer %d epoch %d (transactional id "
                        "%r) refused, %s: the coordinator did not confirm the partition is in "
                        "its ongoing transaction (%s)", *key, item.header.producer_id,
                        item.header.producer_epoch, transactional_id,
                        checks.refused[key][0].name, code.name)
    for key, item in pending.items():
        if key not in checks.refused:
            checks.guards[key] = item.guard
    return checks
