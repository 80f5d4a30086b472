"""A follower's fetcher: one asyncio task per leader node, copying that leader's partitions.

It speaks Kafka to the leader as a broker's replica fetcher does: Fetch with `replica_id` =
this worker's node id (so the leader reads past its high watermark, up to its log end, and
counts the fetch offset as this replica's log end), and what comes back for each partition
goes to that `Partition` in one call (`append_as_follower`: the batches as they are, offsets
and leader epochs kept, with the leader's high watermark and log start).

Before a partition's first fetch from a leader epoch, its log is truncated as KIP-101 and
KIP-279 say, never blindly to its high watermark: the follower asks the leader
(OffsetForLeaderEpoch) where the follower's latest epoch ends in the leader's log. If the
leader knows that epoch, the log is cut at that end; if the leader answers an older epoch,
the cut is at the lower of the leader's end of that epoch and the follower's own; if the
leader knows no epoch at all, nothing it holds can be compared, and the log is cut at its
high watermark (Kafka's fallback). Either way the log keeps everything the leader also has.

The follower also follows the leader's log start, as each fetch response states it (the
leader moved it by retention, or the group coordinator by a snapshot, `delete_records_before`):
up to the leader's and never past its own high watermark (`Partition.follow_log_start`), so
its copy does not keep what the leader dropped. A follower whose log ends below the leader's
log start (away while the leader deleted what it would fetch next) is answered
OFFSET_OUT_OF_RANGE: it restarts its log empty at the leader's log start (Kafka's
truncateFullyAndStartAt) and copies from there.

The partitions to truncate are asked about in one OffsetForLeaderEpoch request, and every
partition ready is fetched in one Fetch: a leader change of many partitions costs one round
trip of each, not one per partition. The Fetches of one connection form a KIP-227 session
(fetch_session.py): after the first, a request names only the partitions whose position
moved, and the answer leaves out those with nothing new, so an idle follower of thousands of
partitions sends and reads almost nothing every `replica.fetch.wait.max.ms`.

Pipelining a catch-up: a fetch is a round trip, and one partition catching up moves at most
`replica.fetch.max.bytes` per trip, so with one fetch in flight the leader idles while the
follower appends and the follower idles while the leader reads and sends. While every
partition's answer ends below the leader's high watermark, the next Fetch (from the end of
the batches in hand) is sent before they are appended, so the leader works on it meanwhile.
Its fetch offset names our log end a moment early, which is harmless below the high
watermark: it moves neither the high watermark nor the ISR (a replica joins at the high
watermark, and one in the ISR never lies below it), so acks=all still counts only copies that
are there; a follower in sync is never pipelined. If an append then fails or the log moved
(a truncation, a new epoch), the answer in flight is dropped with the connection, which is
opened again at once (`_landed`). The settings are `fetch_settings.py`'s, Kafka's keys.

Errors: a lost connection or a decode error close the connection and retry after RETRY_S. A
partition the leader refuses (usually a leader that does not lead yet: its supervisor has
not heard of the controller's decision, which reaches every appliance at about the same
time) is left out of the requests for RETRY_MIN_S, then for pauses doubling up to RETRY_S,
while the fetcher's other partitions go on: one refused partition must not hold the high
watermark (so acks=all writes and group commits) of the others. Nothing here raises to the
loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Protocol

from appliance.segments.errors import CorruptRecordError, StorageError
from appliance.workers.replication.dialing import LinkSecurity
from appliance.workers.replication.fetch_session import FollowerSession
from appliance.workers.replication.fetch_settings import ReplicaFetchSettings
from appliance.workers.replication.link import ReplicaLink
from klog.protocol.apis import fetch, offset_for_leader_epoch
from klog.protocol.error_codes import ErrorCode
from klog.protocol.exceptions import ProtocolError
from klog.protocol.record_batch import CorruptBatchError, scan_batches

if TYPE_CHECKING:
    from appliance.workers.replication.partition import Partition
    from appliance.workers.replication.throttle import FollowerThrottle

log = logging.getLogger(__name__)

FETCH_VERSION = 11
EPOCH_VERSION = 3
DEFAULTS = ReplicaFetchSettings()  # for a `Followers` that states none
RETRY_S = 0.3  # the longest pause after a refusal or a lost connection
RETRY_MIN_S = 0.02  # the first pause after a refusal


class Followed:
    """A partition a fetcher copies: the leader epoch it follows in, whether it must truncate
    before its next fetch, and its own pause after the leader refused it (the others of the
    fetcher go on meanwhile)."""

    __slots__ = ("leader_epoch", "truncate", "retry_s", "ready_at")

    def __init__(self, leader_epoch: int):
        self.leader_epoch = leader_epoch
        self.truncate = True
        self.retry_s = RETRY_MIN_S
        self.ready_at = 0.0  # loop time before which it is left out of requests

    def refused(self, now: float) -> None:
        self.ready_at = now + self.retry_s
        self.retry_s = min(self.retry_s * 2, RETRY_S)

    def answered(self) -> None:
        self.retry_s = RETRY_MIN_S


class Followers(Protocol):
    """What a fetcher uses of its replica manager (`manager.py`)."""

    node_id: int
    throttle: FollowerThrottle  # a reassignment's (throttle.py)
    link_security: LinkSecurity  # the inter-broker listener's TLS, SASL and client id
    fetch_settings: ReplicaFetchSettings  # replica.fetch.* (fetch_settings.py)

    def now_ms(self) -> int: ...

    def leader_address(self, leader: int) -> tuple[str, int] | None:
        """Where the leader's node listens, or None while the fleet does not list it."""

    def following(self, key, leader: int, leader_epoch: int) -> Partition | None:
        """The partition, if this worker still follows `leader` in `leader_epoch` for it."""


class ReplicaFetcher:
    def __init__(self, followers: Followers, leader: int):
        self.followers = followers
        self.leader = leader
        self.partitions: dict[tuple[str, int], Followed] = {}
        self._wake = asyncio.Event()
        self._polling: ReplicaLink | None = None  # while a Fetch waits at the leader
        self._interrupted = False
        self._stopped = False
        self._task = asyncio.ensure_future(self._run())

    @property
    def idle(self) -> bool:
        return not self.partitions

    def add(self, key, leader_epoch: int) -> None:
        """Follow `key` from this leader in `leader_epoch`. A Fetch waiting at the leader
        without it (up to replica.fetch.wait.max.ms) is dropped with its connection, so that the new
        partition is truncated and fetched now: a leader just elected holds its high
        watermark, and every acks=all write, until each follower in its ISR has fetched."""
        self.partitions[key] = Followed(leader_epoch)
        self._wake.set()
        if self._polling is not None:
            self._interrupted = True
            self._polling.abort()

    def remove(self, key) -> None:
        self.partitions.pop(key, None)

    def stop(self) -> None:
        """Cancel the loop, and make it end even if the cancellation is lost: Python 3.11's
        asyncio.wait_for can swallow a cancellation that arrives as its inner wait completes,
        and this loop would then run on; a worker stopping waits for every task, so it never
        exited (seen: a worker still alive 20 minutes after SIGTERM)."""
        self._stopped = True
        self.partitions.clear()
        self._wake.set()
        self._task.cancel()

    # the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        failing = False
        while not self._stopped:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            address = self.followers.leader_address(self.leader)
            if address is None:
                await asyncio.sleep(RETRY_S)
                continue
            try:
                link = await ReplicaLink.open(*address, self.followers.node_id,
                                              security=self.followers.link_security)
            except (OSError, TimeoutError, ConnectionError, ProtocolError) as exc:
                if not failing:  # once per outage: the leader's node may take a while to go
                    log.info("replica fetcher to %d: cannot connect: %r", self.leader, exc)
                failing = True
                await asyncio.sleep(RETRY_S)
                continue
            failing = False
            try:
                await self._session(link)
            except (OSError, ProtocolError, ConnectionError, TimeoutError) as exc:
                if not self._interrupted:
                    log.info("replica fetcher to %d: %r; reconnecting", self.leader, exc)
            finally:
                await link.close()
            if self._interrupted:  # dropped on purpose (`add`): reconnect at once
                self._interrupted = False
                continue
            await asyncio.sleep(RETRY_S)

    async def _session(self, link) -> None:
        loop = asyncio.get_running_loop()
        session = FollowerSession()  # KIP-227, one per connection (fetch_session.py)
        while self.partitions:
            now = loop.time()
            ready = [(key, f) for key, f in self.partitions.items() if f.ready_at <= now]
            if not ready:  # each was refused lately: wait for the first due, or a new one
                self._wake.clear()
                due = min(f.ready_at for f in self.partitions.values())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), due - now)
                continue
            pending = [(key, f) for key, f in ready if f.truncate]
            if pending:
                await self._truncate(link, pending)
            wanted = [(key, f) for key, f in ready
                      if not f.truncate and self.partitions.get(key) is f]
            if wanted:
                await self._fetch(link, wanted, session)

    def _refused(self, key, followed: Followed) -> None:
        """The leader refused `key` (usually a leader that does not lead yet: told within
        milliseconds of us): leave it out of requests for a pause, doubling each time."""
        followed.refused(asyncio.get_running_loop().time())

    # truncation --------------------------------------------------------------------------

    async def _truncate(self, link, pending) -> None:
        """Truncate each partition of `pending` by the leader's OffsetForLeaderEpoch answer,
        one request for all of them."""
        asks = {}
        for key, followed in pending:
            partition = self.followers.following(key, self.leader, followed.leader_epoch)
            if partition is None:
                self.partitions.pop(key, None)
                continue
            plog = partition.log
            ours = plog.leader_epochs.latest_epoch
            if ours < 0 and plog.log_end_offset == plog.log_start_offset:
                followed.truncate = False  # an empty log: nothing to compare
                continue
            asks[key] = (followed, ours)
        if not asks:
            return
        by_topic: dict[str, list] = {}
        for (topic, index), (followed, ours) in asks.items():
            by_topic.setdefault(topic, []).append(
                offset_for_leader_epoch.OffsetForLeaderPartition(
                    partition=index, current_leader_epoch=followed.leader_epoch,
                    leader_epoch=ours))
        request = offset_for_leader_epoch.Request(replica_id=self.followers.node_id, topics=[
            offset_for_leader_epoch.OffsetForLeaderTopic(topic=t, partitions=p)
            for t, p in by_topic.items()])
        response = await link.ask(offset_for_leader_epoch.SPEC.key, EPOCH_VERSION, request)
        for topic in response.topics:
            for answer in topic.partitions:
                key = (topic.topic, answer.partition)
                if key in asks:
                    followed, ours = asks.pop(key)
                    if not self._cut(key, followed, ours, answer):
                        self._refused(key, followed)
        for key, (followed, _) in asks.items():  # left out of the answer: asked again
            self._refused(key, followed)

    def _cut(self, key, followed: Followed, ours: int, answer) -> bool:
        """Cut our log where the leader's answer says (module docstring); False if refused."""
        if answer.error_code != ErrorCode.NONE:
            log.info("%s-%d: leader %d refused OffsetForLeaderEpoch: %s", *key, self.leader,
                     ErrorCode(answer.error_code).name)
            return False
        partition = self.followers.following(key, self.leader, followed.leader_epoch)
        if partition is None:
            return True  # no longer ours to follow here
        plog = partition.log
        target = truncation_offset(plog, ours, answer.leader_epoch, answer.end_offset)
        if target < plog.log_end_offset:
            log.warning("%s-%d: truncating from %d to %d (our epoch %d, leader's answer: "
                        "epoch %d ends at %d)", *key, plog.log_end_offset, target, ours,
                        answer.leader_epoch, answer.end_offset)
            try:
                partition.truncate_to(target, now_ms=self.followers.now_ms())
            except StorageError as exc:
                log.error("%s-%d: truncation failed: %s", *key, exc)
                return False
        followed.truncate = False
        return True

    # fetching ----------------------------------------------------------------------------

    async def _fetch(self, link, wanted, session: FollowerSession) -> None:
        """One Fetch for every partition ready, and while each answer lies wholly below the
        leader's high watermark, the next Fetch sent before this one's batches are appended
        (module docstring: pipelining a catch-up). In the fetch session, a partition the
        answer leaves out has nothing new."""
        settings = getattr(self.followers, "fetch_settings", DEFAULTS)
        throttle = self.followers.throttle  # a reassignment's (throttle.py)
        limits, throttled = throttle.limits([key for key, _ in wanted], settings.max_bytes)
        offsets = {}
        for key, followed in wanted:
            partition = self.followers.following(key, self.leader, followed.leader_epoch)
            if partition is None:
                self.partitions.pop(key, None)
                continue
            if limits[key] <= 0:
                continue  # throttled, and its bucket is empty: not in this fetch
            offsets[key] = (partition.log.log_end_offset, partition.log.log_start_offset)
        if not offsets:
            if throttled:
                await asyncio.sleep(throttle.delay_s())
            return
        asked = dict(wanted)
        self._polling = link
        try:
            link.send(fetch.SPEC.key, FETCH_VERSION, self._request(
                asked, offsets, limits, settings, session))
            timeout_s = settings.wait_max_ms / 1000 + 30
            while True:
                response = await link.receive(timeout_s=timeout_s)
                if not session.answered(response):
                    log.info("replica fetcher to %d: the leader answered %s; opening a new "
                             "fetch session", self.leader, ErrorCode(response.error_code).name)
                    return
                ahead = None if throttled or not settings.pipeline else \
                    self._ahead(response, asked)
                if ahead is not None:  # the next Fetch travels while this one is appended
                    link.send(fetch.SPEC.key, FETCH_VERSION, self._request(
                        asked, ahead, limits, settings, session))
                self._take_all(response, asked, throttled, throttle)
                if ahead is None:
                    return
                if not self._landed(asked, ahead):
                    # an append failed, or the partition moved meanwhile: the answer in
                    # flight is not for this log; drop it with the connection, at once
                    self._interrupted = True
                    link.abort()
                    raise ConnectionError("a pipelined fetch no longer fits the log")
        finally:
            self._polling = None

    def _request(self, asked, offsets, limits, settings, session) -> fetch.Request:
        positions = {key: (fetch_offset, log_start, limits[key], asked[key].leader_epoch)
                     for key, (fetch_offset, log_start) in offsets.items()}
        return session.request(
            positions, replica_id=self.followers.node_id, max_wait_ms=settings.wait_max_ms,
            min_bytes=settings.min_bytes, max_bytes=settings.response_max_bytes,
            isolation_level=0, rack_id="")

    def _ahead(self, response, asked) -> dict | None:
        """The offsets to fetch next, before this answer is appended, or None to wait for
        the appends. Only when every partition asked came back without an error, each with
        nothing or with batches that end below the leader's high watermark (and some with
        batches): a fetch offset names the follower's log end to the
        leader, and one below the high watermark moves neither the high watermark nor the
        ISR (a replica joins at the high watermark; one in the ISR is never below it), so
        claiming it a moment before the append lands cannot count as a copy that is not
        there. A follower in sync is therefore never pipelined: acks=all keeps its meaning."""
        if not any(part.records for topic in response.responses
                   for part in topic.partitions):
            return None  # nothing came: nothing to pipeline
        ahead = {}
        moving = False
        for key in asked.keys() - _keys(response):  # left out of a session's answer: nothing
            partition = self.followers.following(key, self.leader, asked[key].leader_epoch)
            if partition is None:
                return None
            ahead[key] = (partition.log.log_end_offset, partition.log.log_start_offset)
        for topic in response.responses:
            for part in topic.partitions:
                key = (topic.topic, part.partition_index)
                if key not in asked or part.error_code != ErrorCode.NONE:
                    return None
                partition = self.followers.following(key, self.leader,
                                                     asked[key].leader_epoch)
                if partition is None:
                    return None
                if not part.records:  # nothing came: asked again where its log ends now
                    ahead[key] = (partition.log.log_end_offset, partition.log.log_start_offset)
                    continue
                moving = True
                end = None
                try:
                    for _position, header in scan_batches(part.records, verify_crc=False):
                        if end is None and header.base_offset != partition.log.log_end_offset:
                            return None
                        end = header.next_offset
                except CorruptBatchError:
                    return None
                if end is None or end >= part.high_watermark:
                    return None
                ahead[key] = (end, max(partition.log.log_start_offset, part.log_start_offset))
        return ahead if moving and len(ahead) == len(asked) else None

    def _landed(self, asked, ahead) -> bool:
        """Each partition's log ends where its pipelined fetch said it would."""
        for key, (end, _) in ahead.items():
            followed = self.partitions.get(key)
            partition = self.followers.following(key, self.leader, asked[key].leader_epoch)
            if followed is not asked[key] or followed.truncate or partition is None or \
                    partition.log.log_end_offset != end:
                return False
        return True

    def _take_all(self, response, asked, throttled, throttle) -> None:
        for key in asked.keys() - _keys(response):  # left out of a session's answer: nothing
            asked[key].answered()                    # new, and not refused
        for topic in response.responses:
            for part in topic.partitions:
                key = (topic.topic, part.partition_index)
                followed = asked.get(key)
                if followed is None:
                    continue  # not asked for: nothing to take
                if key in throttled and part.records:
                    throttle.spend(len(part.records))
                if self._take(key, followed.leader_epoch, part):
                    followed.answered()
                else:
                    self._refused(key, followed)

    def _take(self, key, leader_epoch: int, part) -> bool:
        """Hand what the leader answered for `key` to its partition; False if the leader
        refused it (or we could not take it)."""
        partition = self.followers.following(key, self.leader, leader_epoch)
        if partition is None:
            return True
        if part.error_code != ErrorCode.NONE:
            error = ErrorCode(part.error_code)
            if error == ErrorCode.OFFSET_OUT_OF_RANGE and \
                    part.log_start_offset > partition.log.log_end_offset:
                return self._restart_at(key, partition, part.log_start_offset)
            if error == ErrorCode.OFFSET_OUT_OF_RANGE:
                self._compare_again(key)
            log.info("%s-%d: leader %d answered %s", *key, self.leader, error.name)
            return False
        try:  # the records are a view of the response's own buffer (link.py)
            taken = partition.append_as_follower(
                part.records, leader_high_watermark=part.high_watermark,
                leader_log_start_offset=part.log_start_offset, now_ms=self.followers.now_ms())
        except (CorruptRecordError, CorruptBatchError, StorageError) as exc:
            log.error("%s-%d: cannot append the leader's batches: %s", *key, exc)
            return False
        if not taken:  # the leader's batch boundaries are not ours: compare epochs again
            self._compare_again(key)
        return taken

    def _restart_at(self, key, partition, leader_log_start: int) -> bool:
        """Our log ends below the leader's log start: nothing here continues it."""
        log.warning("%s-%d: our log ends at %d, below leader %d's log start %d: restarting "
                    "it there", *key, partition.log.log_end_offset, self.leader,
                    leader_log_start)
        try:
            partition.truncate_fully_and_start_at(leader_log_start,
                                                  now_ms=self.followers.now_ms())
        except StorageError as exc:
            log.error("%s-%d: cannot restart the log at %d: %s", *key, leader_log_start, exc)
            return False
        return True

    def _compare_again(self, key) -> None:
        """Truncate by the leader's epochs again before the next fetch of `key`."""
        followed = self.partitions.get(key)
        if followed is not None:
            followed.truncate = True


def _keys(response) -> set[tuple[str, int]]:
    return {(topic.topic, part.partition_index) for topic in response.responses
            for part in topic.partitions}


def truncation_offset(plog, ours: int, leader_epoch: int, end_offset: int) -> int:
    """Where a follower's log must end, given the leader's OffsetForLeaderEpoch answer
    (`leader_epoch`, `end_offset`) to the follower's latest epoch `ours` (module docstring).
    Never above the log end: a leader that has more is simply fetched from."""
    if end_offset < 0:  # the leader knows no epoch: Kafka's fallback
        target = plog.high_watermark
    elif leader_epoch == ours:
        target = end_offset
    elif leader_epoch >= 0:  # KIP-279: the leader's largest epoch below ours, and our end of it
        target = min(end_offset, plog.end_offset_for_epoch(leader_epoch)[1])
    else:
        target = end_offset
    return min(target, plog.log_end_offset)

