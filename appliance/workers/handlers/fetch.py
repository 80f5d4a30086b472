"""Fetch v4-11: whole batches straight from segment files, with long polling.

Each partition's records are a `FileRegion` that the connection sends with sendfile, so no
payload byte enters Python, except a small read (under INLINE_RECORDS_BYTES: a follower's
steady state, one batch per fetch, and most consumers' answers): that is read into the
response, which then leaves in one write. As a region it would cost a write of the header,
sendfile's own rounds of the event loop, and a wake-up of the reader for each part.

Budgets follow KIP-74: `partition_max_bytes` per partition and
`max_bytes` in all, except that the first partition with data always gets one whole batch, so
a batch larger than the budgets can still be consumed. When fewer than `min_bytes` are ready
the fetch waits, up to `max_wait_ms`, for an append to one of its partitions. Followers'
fetches are served in KIP-227 sessions (fetch_sessions.py): an incremental request reads
every partition of its session, and its answer leaves out those with nothing new. A
consumer's fetch is answered session id 0, and its client sends full requests.

In cluster mode a consumer's fetch (replica_id -1) is first checked against the partition's
leadership as this worker knows it (consumer_fencing.py: FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER at a follower). A fetch above the high
watermark but within the log is answered empty, never OFFSET_OUT_OF_RANGE: a leader just
elected holds records up to the old leader's high watermark, which consumers have read, before
its own high watermark has caught up (it waits for its followers' next fetches), and clients
reset their position on OFFSET_OUT_OF_RANGE.

Transactions (KIP-98): every answer carries the partition's last stable offset (the high
watermark while no transaction is open). A read_committed consumer (isolation_level 1) reads
below it only, and is told the aborted transactions (producer id, first offset) that overlap
what it gets, from the segments' .txnindex files, so it drops their records; any worker
serves it, the LSO and an aborted count being published in shm beside the high watermark.
"""

from __future__ import annotations

import asyncio
import logging
import os

from appliance.security.acls import Operation
from appliance.segments.errors import OffsetOutOfRangeError, StorageError
from appliance.workers import access, leader_hints
from appliance.workers.consumer_fencing import consumer_refusal
from appliance.workers.fetch_sessions import FetchSessions, refusal
from appliance.workers.handler_context import HandlerContext
from appliance.workers.replication.identity import is_trusted_replica
from appliance.workers.shared_state import NotPublishedError
from klog.protocol.apis import fetch
from klog.protocol.chunks import FileRegion
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

API_KEY = fetch.SPEC.key
INLINE_RECORDS_BYTES = 64 * 1024
READ_COMMITTED = 1


def _partition(index, error, log=None, records=b"", aborted=None):
    if log is None:
        hwm = lso = start = -1
    else:
        hwm, lso, start = log.high_watermark, log.last_stable_offset, log.log_start_offset
    return fetch.PartitionData(
        partition_index=index, error_code=int(error), high_watermark=hwm,
        last_stable_offset=lso, log_start_offset=start, aborted_transactions=aborted,
        preferred_read_replica=-1, records=records)


def _aborted(readable, fetch_offset: int):
    """A read_committed answer's aborted transactions that overlap what it returns (it stops
    at the last stable offset, the bound asked for); None when there are none."""
    found = readable.aborted_transactions(fetch_offset, readable.last_stable_offset)
    if not found:
        return None
    return [fetch.AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
            for a in found]


def _read(worker, topic, part, budget, must_fill, replica_id=-1, committed=False,
          incremental=False):
    """One partition's answer and the bytes it carries. Any worker serves any partition of
    the appliance: its own from its logs, the others' through the shared-memory index.
    `incremental`: a session's partition with nothing new is answered None (left out)."""
    if replica_id < 0:
        refused = consumer_refusal(worker.control.topic(topic), part.partition,
                                   part.current_leader_epoch, worker.node_id_of)
        if refused is not None:
            return _partition(part.partition, refused), 0, True
    if incremental and replica_id >= 0:
        partition = worker.partitions.get(topic, part.partition)
        if partition is not None and part.unchanged(partition) and \
                partition.note_idle_fetch(replica_id, part.fetch_offset,
                                          part.current_leader_epoch, part.log_start_offset):
            return None, 0, False  # a session's follower at our log end: nothing to tell
    readable = worker.readable_log(topic, part.partition)
    if readable is None:
        error = worker.absent_partition_error(topic, part.partition)
        return _partition(part.partition, error), 0, True
    limit = min(part.partition_max_bytes, budget)
    wanted = max(limit, 1) if limit > 0 or must_fill else 0
    try:
        if replica_id >= 0:  # a follower: past the high watermark; its log end is noted
            piece = _follower_read(worker, topic, part, replica_id, wanted)
            if isinstance(piece, ErrorCode):
                return _partition(part.partition, piece), 0, True
        else:
            piece = readable.read(part.fetch_offset, wanted, committed=committed) \
                if wanted else None
    except OffsetOutOfRangeError:
        return _partition(part.partition, ErrorCode.OFFSET_OUT_OF_RANGE, readable), 0, True
    except StorageError:
        return _partition(part.partition, ErrorCode.KAFKA_STORAGE_ERROR, readable), 0, True
    except OSError as exc:  # another worker's files (non_owner_reader.py), e.g. EMFILE
        log.error("%s-%d: cannot read: %s", topic, part.partition, exc)
        return _partition(part.partition, ErrorCode.KAFKA_STORAGE_ERROR, readable), 0, True
    except NotPublishedError:
        return _partition(part.partition, ErrorCode.NOT_LEADER_OR_FOLLOWER), 0, True
    if piece is None or piece.length == 0 or piece.length > limit and not must_fill:
        if incremental and part.unchanged(readable):
            return None, 0, False
        return _partition(part.partition, ErrorCode.NONE, readable), 0, False
    try:
        aborted = _aborted(readable, part.fetch_offset) if committed else None
    except StorageError:
        return _partition(part.partition, ErrorCode.KAFKA_STORAGE_ERROR, readable), 0, True
    records = _small_read(piece)
    if records is None:
        records = FileRegion(piece.fd, piece.position, piece.length)
        noted = getattr(readable, "region_handed_out", None)  # another worker's partition
        if noted is not None:
            noted()
    worker.note_fetched(topic, part.partition, piece.length)
    return (_partition(part.partition, ErrorCode.NONE, readable, records, aborted),
            piece.length, False)


def _follower_read(worker, topic, part, replica_id, max_bytes):
    """A follower's fetch: the leading partition records it and answers (only a partition
    this worker holds can be led here)."""
    partition = worker.partitions.get(topic, part.partition)
    if partition is None:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return partition.record_follower_fetch(replica_id, part.fetch_offset,
                                           part.current_leader_epoch, max_bytes,
                                           part.log_start_offset)


def _small_read(piece) -> bytes | None:
    """The bytes of a small read (module docstring), or None: send it as a file region."""
    if piece.length >= INLINE_RECORDS_BYTES:
        return None
    try:
        data = os.pread(piece.fd, piece.length, piece.position)
    except OSError:
        return None  # sendfile meets the same error, and reports it
    return data if len(data) == piece.length else None


def build(worker, body, denied=frozenset(), incremental=False):
    """The response as it stands now, its byte count, and whether an error needs no waiting.
    Topics in `denied` (the authorizer's refusals) answer TOPIC_AUTHORIZATION_FAILED.
    `incremental`: `body` is a session's (fetch_sessions.py); partitions with nothing new,
    and topics left with none, are left out."""
    budget = body.max_bytes if body.max_bytes > 0 else 2**31 - 1
    total = 0
    errored = False
    responses = []
    committed = body.isolation_level == READ_COMMITTED and body.replica_id < 0
    for topic in body.topics:
        partitions = []
        for part in topic.partitions:
            if topic.topic in denied:
                partitions.append(_partition(part.partition,
                                             ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                errored = True
                continue
            data, size, error = _read(worker, topic.topic, part, budget - total, total == 0,
                                      body.replica_id, committed, incremental)
            if data is None:
                continue
            partitions.append(data)
            total += size
            errored = errored or error
        if partitions or not incremental:
            responses.append(fetch.FetchableTopicResponse(topic=topic.topic,
                                                          partitions=partitions))
    response = fetch.Response(throttle_time_ms=0, error_code=0, session_id=0,
                              responses=responses)
    return response, total, errored


def _denied(worker, request, body, cluster_allowed: bool) -> frozenset[str]:
    """A consumer needs READ on each topic; a replica CLUSTER_ACTION on the cluster
    (`cluster_allowed`, else every topic is refused, as Kafka answers)."""
    names = [t.topic for t in body.topics]
    if body.replica_id >= 0:
        return frozenset() if cluster_allowed else frozenset(names)
    return access.refused_topics(worker, request, Operation.READ, names)


def _untrusted_replica(worker, request, body) -> bool:
    """A replica fetch that does not come from that replica (replication/identity.py)."""
    return body.replica_id >= 0 and not is_trusted_replica(
        request, body.replica_id, cluster_id=worker.cluster_id,
        inter_broker_listener=worker.config.inter_broker_name)


def _refused(body, code: ErrorCode):
    return fetch.Response(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        fetch.FetchableTopicResponse(topic=t.topic, partitions=[
            _partition(p.partition, code) for p in t.partitions]) for t in body.topics])


def handle(worker: HandlerContext, request):
    replica = request.body.replica_id >= 0
    cluster_allowed = not replica or access.on_cluster(worker, request,
                                                       Operation.CLUSTER_ACTION)
    untrusted = replica and cluster_allowed and _untrusted_replica(worker, request,
                                                                   request.body)
    sessions = request.fetch_sessions
    if sessions is None:  # not served by a connection (tests): a session lives on one
        sessions = FetchSessions()
    # only a replica that may fetch as one gets a session (and memory of its partitions)
    session, body, refused = sessions.open(request.body,
                                           keep=replica and cluster_allowed and not untrusted)
    if refused != ErrorCode.NONE:
        return refusal(refused)
    incremental = session is not None and request.body.session_epoch > 0
    denied = _denied(worker, request, body, cluster_allowed)
    if untrusted:
        return _answer(worker, request, session,
                       _refused(body, ErrorCode.NOT_LEADER_OR_FOLLOWER))
    response, total, errored = build(worker, body, denied, incremental)
    if errored or total >= body.min_bytes or body.max_wait_ms <= 0 or total > 0 and (
            body.min_bytes <= 1):
        return _answer(worker, request, session, response)
    keys = [(t.topic, p.partition) for t in body.topics for p in t.partitions]
    woken = worker.waiters.register(keys, replica=replica)  # in the step that just read
    poll = _long_poll(worker, body, worker.now_ms() + body.max_wait_ms, denied, incremental,
                      keys, woken, response if total == 0 else None)
    if session is not None or request.header.api_version >= leader_hints.FETCH_HINTS_VERSION:
        poll = _answered_later(worker, request, session, poll)
    task = asyncio.ensure_future(poll)
    # a task cancelled before it first runs (its connection closed) never reaches the
    # unregistering of `woken`: this does it then
    task.add_done_callback(lambda _: worker.waiters.unregister(woken, keys, replica=replica))
    return task


def _answer(worker, request, session, response):
    """The answer as it leaves: its session's id, remembered by the session (what an
    incremental answer leaves out is measured against it), with KIP-951's hints."""
    if session is not None:
        response.session_id = session.id
        session.answered(response)
    return leader_hints.add_to_fetch(worker, request, response)


async def _answered_later(worker, request, session, poll):
    """A long poll's answer, finished as `_answer` does (leadership may move while it
    waits, and a session must remember the answer that left, not an earlier pass)."""
    return _answer(worker, request, session, await poll)


async def _long_poll(worker, body, deadline_ms, denied, incremental, keys, woken, empty=None):
    """Wait for appends, then read again. `woken` was registered in the same step as the
    read before this coroutine (and each later one is registered right after its read, no
    await between them), so an append that lands while this waits, or before it first ran,
    is never missed.

    `empty`: the answer of that read when it carried no records. A consumer's fetch that
    nothing woke until its deadline is answered with it, not read again: an append or a
    move of the high watermark (which bounds what a consumer reads, and with it the last
    stable offset) would have woken it, so the read would find what it found. At most a log
    start moved by retention is up to `max_wait_ms` old, and a leadership that moved away
    meanwhile is told by the client's next fetch, which follows at once. Why: an idle
    consumer of 10,000 partitions asks for all of them twice a second (a consumer's fetch
    gets no session here, fetch_sessions.py), and the second read of each was a third of
    what its workers spent. A
    follower's fetch is read again: a high watermark moved by another follower does not
    wake it, and the answer is how followers learn it."""
    replica = body.replica_id >= 0
    while True:
        remaining_ms = deadline_ms - worker.now_ms()
        was_woken = False
        if remaining_ms > 0:
            was_woken = await worker.waiters.wait_registered(woken, keys, remaining_ms / 1000,
                                                             replica=replica)
        if empty is not None and not was_woken and not replica:
            return empty
        response, total, errored = build(worker, body, denied, incremental)
        if errored or total >= max(body.min_bytes, 1) or deadline_ms <= worker.now_ms():
            return response
        empty = response if total == 0 else None
        woken = worker.waiters.register(keys, replica=replica)
