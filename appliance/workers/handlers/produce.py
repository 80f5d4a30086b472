"""Produce v3-8: append each partition's batches; answer per partition.

acks=1 answers once the batches are in the log (visible to fetches); acks=all (-1) answers
once they are also on disk, through the worker's group commit, so many producers share one
fdatasync (and, for a replicated partition, once its high watermark passes them); acks=0 gets
no response at all, as in Kafka. Idempotence checks happen in
`OwnedPartitions.append`. zstd needs Produce v7+ (KIP-110).
"""

from __future__ import annotations

import asyncio
from functools import partial

from appliance.workers.connection import NO_RESPONSE
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import produce
from klog.protocol.error_codes import ErrorCode
from klog.protocol.record_batch import CODEC_ZSTD, HEADER_BYTES, read_header

API_KEY = produce.SPEC.key
ZSTD_MIN_VERSION = 7


def _partition_response(index, error, base_offset=-1, append_time=-1, log_start=-1,
                        message=None):
    return produce.PartitionProduceResponse(
        index=index, error_code=int(error), base_offset=base_offset,
        log_append_time_ms=append_time, log_start_offset=log_start, record_errors=[],
        error_message=message)


def _uses_zstd(records) -> bool:
    return len(records) >= HEADER_BYTES and read_header(records).codec == CODEC_ZSTD


def _append_one(worker, topic, partition_data, version, now_ms):
    records = partition_data.records
    index = partition_data.index
    if records is not None and version < ZSTD_MIN_VERSION and _uses_zstd(records):
        return _partition_response(index, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                   message="zstd needs Produce v7 or later"), None
    info = worker.controller.topic(topic)
    if info is not None and info.internal:
        return _partition_response(index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                                   message=f"{topic} is internal: clients cannot append"), None
    if not worker.leads(topic, index):
        return _partition_response(index, worker.absent_partition_error(topic, index)), None
    outcome = worker.partitions.append(topic, index, records, now_ms=now_ms)
    response = _partition_response(index, outcome.error, outcome.base_offset,
                                   outcome.log_append_time_ms, outcome.log_start_offset,
                                   outcome.message)
    return response, (outcome if outcome.error == ErrorCode.NONE else None)


def _ensure_topic(worker, name) -> None:
    if worker.controller.topic(name) is None and worker.config.auto_create_topics_enable:
        worker.controller.create_topic(name)


def handle(worker: HandlerContext, request):
    body = request.body
    version = request.header.api_version
    now_ms = worker.now_ms()
    responses = []
    to_sync = []
    for topic_data in body.topic_data:
        name = topic_data.name
        partitions = []
        if body.acks not in (0, 1, -1):
            partitions = [_partition_response(p.index, ErrorCode.INVALID_REQUIRED_ACKS)
                          for p in topic_data.partition_data]
        elif body.transactional_id is not None:
            partitions = [_partition_response(p.index,
                                              ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                              message="klog does not support transactions")
                          for p in topic_data.partition_data]
        else:
            _ensure_topic(worker, name)
            for partition_data in topic_data.partition_data:
                refused = body.acks == -1 and worker.replication.acks_all_refusal(
                    name, partition_data.index)
                if refused:  # replicated: fewer in sync than min.insync.replicas
                    partitions.append(_partition_response(
                        partition_data.index, refused, message="the ISR is smaller than "
                        "min.insync.replicas"))
                    continue
                response, appended = _append_one(worker, name, partition_data, version, now_ms)
                partitions.append(response)
                if appended is not None and body.acks == -1:
                    to_sync.append((name, partition_data.index, appended.last_offset, response))
        responses.append(produce.TopicProduceResponse(name=name, partition_responses=partitions))
    if body.acks == 0:
        return NO_RESPONSE
    result = produce.Response(responses=responses, throttle_time_ms=0)
    if not to_sync:
        return result
    # replicated or not as appended: a replica whose role ends while it syncs (a reassignment
    # removed it) must not answer as a single copy would, for what no other replica may hold
    replicated = _replicated(worker, to_sync)
    if replicated:
        return _after_sync(worker, to_sync, replicated, result, body.timeout_ms)
    return _after_local_sync(worker, to_sync, result, body.timeout_ms)


def _replicated(worker, to_sync) -> list:
    return [entry for entry in to_sync
            if worker.replication.leader_epoch(entry[0], entry[1]) is not None]


def _sync_failed(response, error: BaseException) -> None:
    response.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
    response.error_message = f"fdatasync failed: {error}"
    response.base_offset = -1


def _after_local_sync(worker, to_sync, result, timeout_ms):
    """Single copies (the appliance alone): the answer once every appended partition is on
    disk, as an asyncio future that done-callbacks of the group committer's futures resolve;
    no task, no ``concurrent.futures.Future`` and one wake-up of the loop per sync round, not
    per request (issue 14: a quarter of a worker's instructions per acks=all request went there).
    A partition that became replicated meanwhile still waits for its high watermark
    (`_committed`)."""
    loop = asyncio.get_running_loop()
    answer = loop.create_future()
    left = len(to_sync)

    def synced(response, future) -> None:
        nonlocal left
        if future.exception() is not None:
            _sync_failed(response, future.exception())
        left -= 1
        if left == 0:
            _answer_when_committed(worker, to_sync, result, timeout_ms, answer)

    for topic, index, last_offset, response in to_sync:
        owned = worker.partitions.get(topic, index)
        durable = worker.committer.durable(owned.log, last_offset)
        if durable is None:
            left -= 1  # durable already
        else:
            durable.add_done_callback(partial(synced, response))
    if left == 0:
        _answer_when_committed(worker, to_sync, result, timeout_ms, answer)
    return answer


def _answer_when_committed(worker, to_sync, result, timeout_ms, answer) -> None:
    if answer.done():  # the connection went away and cancelled it
        return
    replicated = _replicated(worker, to_sync)
    if not replicated:
        answer.set_result(result)
        return

    def relay(task) -> None:
        if answer.done():
            return
        if task.cancelled():
            answer.cancel()
        elif task.exception() is not None:
            answer.set_exception(task.exception())
        else:
            answer.set_result(task.result())

    asyncio.ensure_future(_committed(worker, replicated, result, timeout_ms)).add_done_callback(
        relay)


async def _after_sync(worker, to_sync, replicated, result, timeout_ms=30_000):
    """Wait until every appended partition is on disk; a failed sync fails its partition.
    The partitions replicated when appended (`replicated`) also wait until their high
    watermark passes the batch."""
    futures = []
    for topic, index, last_offset, response in to_sync:
        owned = worker.partitions.get(topic, index)
        if owned is None:  # moved away since the append (reassigned): the new leader answers
            response.error_code = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            response.base_offset = -1
            futures.append(asyncio.sleep(0))
            continue
        durable = worker.committer.durable(owned.log, last_offset)
        futures.append(asyncio.sleep(0) if durable is None else durable)
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    for (_, _, _, response), outcome in zip(to_sync, outcomes):
        if isinstance(outcome, BaseException):
            _sync_failed(response, outcome)
    return await _committed(worker, replicated, result, timeout_ms)


async def _committed(worker, replicated, result, timeout_ms):
    """Wait until the high watermark of each replicated partition passes its appended batch
    (NOT_LEADER_OR_FOLLOWER for one whose role ended meanwhile)."""
    committed = await asyncio.gather(*(
        worker.replication.wait_committed(topic, index, last_offset, max(timeout_ms, 0) / 1000)
        for topic, index, last_offset, _ in replicated))
    for (_, _, _, response), error in zip(replicated, committed):
        if error != ErrorCode.NONE and response.error_code == 0:
            response.error_code = int(error)
            response.base_offset = -1
    return result
