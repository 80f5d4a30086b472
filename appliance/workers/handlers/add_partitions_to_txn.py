"""AddPartitionsToTxn: v0-3 from clients, v4-5 from partition leaders (KIP-890).

v0-3: the partitions a transactional producer will write join its transaction (written to
``__transaction_state`` before the answer). Kafka's answers: every partition gets the same
outcome; a partition of an unknown topic is UNKNOWN_TOPIC_OR_PARTITION and one the principal
may not write TOPIC_AUTHORIZATION_FAILED, and then the others are OPERATION_NOT_ATTEMPTED
(nothing is added).

v4+: sent by brokers only, so with an authorizer the caller needs CLUSTER_ACTION on the
cluster (else the top-level CLUSTER_AUTHORIZATION_FAILED, nothing looked at) and no WRITE on
the topics or ids. Each transaction of the batch is answered on its own: ``verify_only`` asks
whether its partitions are in the id's ongoing transaction (`TransactionCoordinator.
verify_partitions`, nothing written: the leader's check before a transactional batch may
start a transaction on a partition); without it the partitions are added as v3 adds them.
"""

from __future__ import annotations

import asyncio

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from appliance.workers.transactions.state import TxnError, fenced_code
from klog.protocol.apis import add_partitions_to_txn as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key
FENCED_SINCE = 2
ABORTABLE_SINCE = 5  # v5 knows TRANSACTION_ABORTABLE (KIP-890) for a partition not added


def _by_topic(errors: dict[tuple[str, int], ErrorCode], version: int) -> list:
    by_topic: dict[str, list] = {}
    for (topic, index), code in errors.items():
        code = fenced_code(code, version=version, fenced_since=FENCED_SINCE)
        by_topic.setdefault(topic, []).append(api.AddPartitionsToTxnPartitionResult(
            partition_index=index, partition_error_code=int(code)))
    return [api.AddPartitionsToTxnTopicResult(name=t, results_by_partition=r)
            for t, r in by_topic.items()]


def _answer(errors: dict[tuple[str, int], ErrorCode], version: int):
    return api.Response(throttle_time_ms=0, results_by_topic_v3_and_below=_by_topic(errors,
                                                                                    version))


def _unknown(worker, partitions, denied=frozenset()) -> dict:
    """Kafka's refusals before the coordinator is asked: empty when there are none."""
    errors = {}
    for topic, index in partitions:
        info = worker.control.topic(topic)
        if topic in denied:
            errors[(topic, index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif info is None or not info.has_partition(index):
            errors[(topic, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if not errors:
        return {}
    return {p: errors.get(p, ErrorCode.OPERATION_NOT_ATTEMPTED) for p in partitions}


def handle(worker: HandlerContext, request):
    body, version = request.body, request.header.api_version
    if version >= api.FIRST_BROKER_VERSION:
        return _from_broker(worker, request)
    partitions = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
    transactional_id = body.v3_and_below_transactional_id
    if not access.on_transactional_id(worker, request, Operation.WRITE, transactional_id):
        return _answer(dict.fromkeys(partitions, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                       version)
    denied = access.refused_topics(worker, request, Operation.WRITE,
                                   [t.name for t in body.v3_and_below_topics])
    errors = _unknown(worker, partitions, denied)
    if errors:
        return _answer(errors, version)
    return _add_v3(worker, transactional_id, body, partitions, version)


async def _add_v3(worker: HandlerContext, transactional_id: str, body, partitions, version):
    errors = await _add(worker, transactional_id, body.v3_and_below_producer_id,
                        body.v3_and_below_producer_epoch, partitions)
    return _answer(errors, version)


async def _add(worker: HandlerContext, transactional_id: str, producer_id: int,
               producer_epoch: int, partitions) -> dict:
    try:
        await worker.transactions.add_partitions(transactional_id, producer_id,
                                                 producer_epoch, partitions)
    except TxnError as exc:
        return dict.fromkeys(partitions, exc.code)
    return dict.fromkeys(partitions, ErrorCode.NONE)


def _from_broker(worker: HandlerContext, request):
    body, version = request.body, request.header.api_version
    if not access.on_cluster(worker, request, Operation.CLUSTER_ACTION):
        return api.error_response(body, version, int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    return _transactions(worker, body.transactions, version)


async def _transactions(worker: HandlerContext, transactions, version: int):
    results = await asyncio.gather(*[_one(worker, t, version) for t in transactions])
    return api.Response(throttle_time_ms=0, error_code=0, results_by_transaction=[
        api.AddPartitionsToTxnResult(transactional_id=t.transactional_id,
                                     topic_results=_by_topic(errors, version))
        for t, errors in zip(transactions, results, strict=True)])


async def _one(worker: HandlerContext, transaction, version: int) -> dict:
    partitions = [(t.name, p) for t in transaction.topics for p in t.partitions]
    errors = _unknown(worker, partitions)
    if errors:
        return errors
    if not transaction.verify_only:
        return await _add(worker, transaction.transactional_id, transaction.producer_id,
                          transaction.producer_epoch, partitions)
    not_added = (ErrorCode.TRANSACTION_ABORTABLE if version >= ABORTABLE_SINCE
                 else ErrorCode.INVALID_TXN_STATE)
    try:
        return worker.transactions.verify_partitions(
            transaction.transactional_id, transaction.producer_id, transaction.producer_epoch,
            partitions, not_added)
    except TxnError as exc:
        return dict.fromkeys(partitions, exc.code)
