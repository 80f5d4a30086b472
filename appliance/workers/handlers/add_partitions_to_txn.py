"""AddPartitionsToTxn v0-3: the partitions a transactional producer will write join its
transaction (written to ``__transaction_state`` before the answer).

Kafka's answers: every partition gets the same outcome; a partition of an unknown topic is
UNKNOWN_TOPIC_OR_PARTITION and one the principal may not write TOPIC_AUTHORIZATION_FAILED,
and then the others are OPERATION_NOT_ATTEMPTED (nothing is added).
"""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from appliance.workers.transactions.state import TxnError, fenced_code
from klog.protocol.apis import add_partitions_to_txn as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key
FENCED_SINCE = 2


def _answer(errors: dict[tuple[str, int], ErrorCode], version: int):
    by_topic: dict[str, list] = {}
    for (topic, index), code in errors.items():
        code = fenced_code(code, version=version, fenced_since=FENCED_SINCE)
        by_topic.setdefault(topic, []).append(api.AddPartitionsToTxnPartitionResult(
            partition_index=index, partition_error_code=int(code)))
    return api.Response(throttle_time_ms=0, results_by_topic_v3_and_below=[
        api.AddPartitionsToTxnTopicResult(name=t, results_by_partition=r)
        for t, r in by_topic.items()])


def handle(worker: HandlerContext, request):
    body, version = request.body, request.header.api_version
    partitions = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
    transactional_id = body.v3_and_below_transactional_id
    if not access.on_transactional_id(worker, request, Operation.WRITE, transactional_id):
        return _answer(dict.fromkeys(partitions, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                       version)
    denied = access.refused_topics(worker, request, Operation.WRITE,
                                   [t.name for t in body.v3_and_below_topics])
    errors = {}
    for topic, index in partitions:
        info = worker.control.topic(topic)
        if topic in denied:
            errors[(topic, index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif info is None or not info.has_partition(index):
            errors[(topic, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if errors:
        return _answer({p: errors.get(p, ErrorCode.OPERATION_NOT_ATTEMPTED) for p in partitions},
                       version)
    return _add(worker, transactional_id, body, partitions, version)


async def _add(worker: HandlerContext, transactional_id: str, body, partitions, version: int):
    try:
        await worker.transactions.add_partitions(
            transactional_id, body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
            partitions)
    except TxnError as exc:
        return _answer(dict.fromkeys(partitions, exc.code), version)
    return _answer(dict.fromkeys(partitions, ErrorCode.NONE), version)
