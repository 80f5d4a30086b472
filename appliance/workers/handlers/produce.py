"""Produce v3-8: append each partition's batches; answer per partition.

Each partition's append is one call to its `Partition` (`append_as_leader`), which checks
the idempotent producer's sequences and, for acks=all (-1), returns one future resolved once
the batches are on disk through the worker's group commit (many producers share one
fdatasync) and, for a replicated partition, once its high watermark has passed them. acks=1
answers once the batches are in the log (visible to fetches); acks=0 gets no response at
all, as in Kafka. zstd needs Produce v7+ (KIP-110).

Transactions (KIP-98): a request with a `transactional_id` needs WRITE on that
TRANSACTIONAL_ID when an authorizer is set (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every
partition, Kafka's answer); its transactional batches open the producer's transaction on each
partition (`Partition`).

KIP-890's first part (`transaction.partition.verification.enable`, on by default as in
Kafka 3.6+): a transactional batch that would start its producer's transaction on a partition
is appended only once the transaction coordinator confirms the partition is in that ongoing
transaction (`transactions/leader_checks.py`); until it answers, the request waits (the
worker does not), and every partition of it is appended after the answer, as Kafka does. A
partition the coordinator denies is INVALID_TXN_STATE ("Partition was not added to the
transaction"), one it could not confirm NOT_ENOUGH_REPLICAS (retriable); nothing of it is
appended, so no transaction is left hanging.
"""

from __future__ import annotations

import asyncio

from appliance.security.acls import Operation, ResourceType
from appliance.workers import access, leader_hints
from appliance.workers.connection import NO_RESPONSE
from appliance.workers.handler_context import HandlerContext
from appliance.workers.transactions import leader_checks
from appliance.workers.transactions.leader_checks import Checks
from klog.protocol.apis import produce
from klog.protocol.error_codes import ErrorCode
from klog.protocol.record_batch import CODEC_ZSTD, HEADER_BYTES, read_header

API_KEY = produce.SPEC.key
ZSTD_MIN_VERSION = 7
# what a request that verifies nothing presents (shared, never changed): with verification
# on, a transactional batch that would start a transaction is refused without a guard
UNVERIFIED = Checks(default=None)
VERIFICATION_OFF = Checks(default=False)


def _partition_response(index, error, base_offset=-1, append_time=-1, log_start=-1,
                        message=None):
    return produce.PartitionProduceResponse(
        index=index, error_code=int(error), base_offset=base_offset,
        log_append_time_ms=append_time, log_start_offset=log_start, record_errors=[],
        error_message=message)


def _uses_zstd(records) -> bool:
    return len(records) >= HEADER_BYTES and read_header(records).codec == CODEC_ZSTD


def _append_one(worker, topic, partition_data, body, version, now_ms, checks: Checks):
    """The partition's answer, and the future acks=all waits on (None: nothing to wait)."""
    records = partition_data.records
    index = partition_data.index
    if checks.refused:  # KIP-890: some partition of this request was refused
        refused = checks.refused.get((topic, index))
        if refused is not None:
            return _partition_response(index, refused[0], message=refused[1]), None
    if records is not None and version < ZSTD_MIN_VERSION and _uses_zstd(records):
        return _partition_response(index, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                   message="zstd needs Produce v7 or later"), None
    info = worker.control.topic(topic)
    if info is not None and info.internal:
        return _partition_response(index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                                   message=f"{topic} is internal: clients cannot append"), None
    if not worker.leads(topic, index):
        return _partition_response(index, worker.absent_partition_error(topic, index),
                                   message=worker.partitions.unopened_reason(topic, index)), None
    outcome = worker.partitions.get(topic, index).append_as_leader(
        records, now_ms=now_ms, required_acks=body.acks, timeout_ms=body.timeout_ms,
        guard=checks.guard((topic, index)) if checks.guards else checks.default)
    return _partition_response(index, outcome.error, outcome.base_offset,
                               outcome.log_append_time_ms, outcome.log_start_offset,
                               outcome.message), outcome.committed


def _ensure_topic(worker, request, name) -> None:
    if worker.control.topic(name) is None and worker.config.auto_create_topics_enable and \
            access.may_create_topic(worker, request, name):
        worker.control.create_topic(name)


def _refused(topic_data, error: ErrorCode, message=None) -> list:
    return [_partition_response(p.index, error, message=message)
            for p in topic_data.partition_data]


def handle(worker: HandlerContext, request):
    body = request.body
    denied = access.refused_topics(worker, request, Operation.WRITE,
                                   [t.name for t in body.topic_data])
    txn_denied = body.transactional_id is not None and not access.allowed(
        worker, request, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
    verifying = worker.config.transaction_partition_verification_enable
    checks = UNVERIFIED if verifying else VERIFICATION_OFF
    if verifying and body.transactional_id is not None and not txn_denied \
            and body.acks in (0, 1, -1):
        pending = leader_checks.to_verify(worker, body, denied)
        if pending:
            answer = _after_verification(worker, request, denied, pending)
            if body.acks == 0:  # no answer, but the appends still follow the verification
                asyncio.ensure_future(answer)
                return NO_RESPONSE
            return answer
    return _appended(worker, request, denied, txn_denied, checks)


async def _after_verification(worker, request, denied, pending):
    checks = await leader_checks.verify(worker, request.body.transactional_id, pending)
    result = _appended(worker, request, denied, False, checks)
    return await result if isinstance(result, asyncio.Future) else result


def _appended(worker: HandlerContext, request, denied, txn_denied: bool, checks: Checks):
    """Append every partition (as `checks` allows); the answer, or a future of it."""
    body = request.body
    version = request.header.api_version
    now_ms = worker.now_ms()
    responses = []
    waiting = []  # (partition response, its acks=all future)
    for topic_data in body.topic_data:
        name = topic_data.name
        if body.acks not in (0, 1, -1):
            partitions = _refused(topic_data, ErrorCode.INVALID_REQUIRED_ACKS)
        elif name in denied:
            partitions = _refused(topic_data, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        elif txn_denied:
            partitions = _refused(topic_data, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        else:
            _ensure_topic(worker, request, name)
            partitions = []
            for partition_data in topic_data.partition_data:
                response, committed = _append_one(worker, name, partition_data, body, version,
                                                  now_ms, checks)
                partitions.append(response)
                if committed is not None:
                    waiting.append((response, committed))
        responses.append(produce.TopicProduceResponse(name=name, partition_responses=partitions))
    if body.acks == 0:
        return NO_RESPONSE
    result = leader_hints.add_to_produce(
        worker, request, produce.Response(responses=responses, throttle_time_ms=0))
    if not waiting:
        return result
    return _when_committed(result, waiting)


def _when_committed(result, waiting) -> asyncio.Future:
    """The answer once every acks=all future has resolved, as one future settled by their
    callbacks: no task, and one wake-up of the loop per group-commit round, not per request
    (issue 14: a quarter of a worker's instructions per acks=all request went to tasks,
    thread futures and gathers)."""
    answer = waiting[0][1].get_loop().create_future()
    left = len(waiting)

    def committed(response, future: asyncio.Future) -> None:
        nonlocal left
        error = future.result()
        if error != ErrorCode.NONE:
            response.error_code = int(error)
            response.base_offset = -1
            if error == ErrorCode.KAFKA_STORAGE_ERROR:
                response.error_message = "fdatasync failed"
        left -= 1
        if left == 0 and not answer.done():  # done: the connection went away
            answer.set_result(result)

    for response, future in waiting:
        future.add_done_callback(lambda f, r=response: committed(r, f))
    return answer
