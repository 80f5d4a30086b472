"""KIP-227 incremental fetch sessions, as a leader keeps them for its followers.

Why: a follower copies every partition it follows from one leader in one Fetch, again every
`replica.fetch.wait.max.ms` while nothing is written. Without a session each of those
requests names every partition and each answer carries every partition back; at a few
thousand replicas per worker, encoding, decoding and answering them took most of an idle
fleet's CPU (a profile of three appliances with 4,000 replicated partitions: each worker
about 27 % busy doing nothing, half of it in Fetch), which slowed every failover. In a
session the follower names only the partitions whose position moved, and the leader answers
only the partitions that have something new.

Kafka's rules, by the request's `session_epoch`:
- -1: a full fetch without a session (a named session is closed first);
- 0: a new session holding the request's partitions, answered in full with its id (a named
  session is closed first);
- N > 0: the named session must exist (FETCH_SESSION_ID_NOT_FOUND) and expect epoch N
  (INVALID_FETCH_SESSION_EPOCH). The request's partitions are added to it or update it, its
  `forgotten_topics_data` leave it, and every partition it holds is read at the position last
  named. The answer holds those with records or an error, or whose high watermark, last
  stable offset or log start is not the one last answered.

Where klog stays within what the KIP allows a broker:
- sessions are kept per connection and closed with it (a follower opens one per connection),
  at most MAX_SESSIONS per connection;
- only a replica's fetch gets one, and only from a replica the leader trusts as one
  (replication/identity.py, and CLUSTER_ACTION under an authorizer): a stray client must not
  make the leader keep partitions for it. A consumer's fetch, or one past the limit, is
  answered session id 0 ("no session"), and its client goes on sending full requests; an
  untrusted one's incremental request, FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

import secrets

from klog.protocol.apis import fetch
from klog.protocol.error_codes import ErrorCode

MAX_SESSIONS = 4  # per connection: a follower needs one
FINAL_EPOCH = fetch.FINAL_SESSION_EPOCH
INITIAL_EPOCH = fetch.INITIAL_SESSION_EPOCH


class CachedPartition:
    """A partition of a session: where it was last asked to be read (it serves `_read` as a
    request's partition does) and what its last answer said."""

    __slots__ = ("partition", "current_leader_epoch", "fetch_offset", "log_start_offset",
                 "partition_max_bytes", "high_watermark", "last_stable_offset",
                 "sent_log_start")

    def __init__(self, asked):
        self.partition = asked.partition
        self.high_watermark = self.last_stable_offset = self.sent_log_start = None
        self.update(asked)

    def update(self, asked) -> None:
        self.current_leader_epoch = asked.current_leader_epoch
        self.fetch_offset = asked.fetch_offset
        self.log_start_offset = asked.log_start_offset
        self.partition_max_bytes = asked.partition_max_bytes

    def unchanged(self, readable) -> bool:
        """Nothing to tell: the log's offsets are those last answered."""
        return (readable.high_watermark == self.high_watermark
                and readable.last_stable_offset == self.last_stable_offset
                and readable.log_start_offset == self.sent_log_start)

    def answered(self, data) -> None:
        self.high_watermark = data.high_watermark
        self.last_stable_offset = data.last_stable_offset
        self.sent_log_start = data.log_start_offset


class _Topic:
    """A session's partitions of one topic, shaped as a request's `FetchTopic`."""

    __slots__ = ("topic", "partitions")

    def __init__(self, topic: str, partitions: list[CachedPartition]):
        self.topic, self.partitions = topic, partitions


class SessionRequest:
    """An incremental request as the handler reads it: the request's own settings, and the
    whole session's partitions as its topics."""

    def __init__(self, body, topics: list[_Topic]):
        self.replica_id = body.replica_id
        self.max_wait_ms = body.max_wait_ms
        self.min_bytes = body.min_bytes
        self.max_bytes = body.max_bytes
        self.isolation_level = body.isolation_level
        self.topics = topics


class FetchSession:
    def __init__(self, session_id: int):
        self.id = session_id
        self.epoch = INITIAL_EPOCH  # the last one served
        self.partitions: dict[tuple[str, int], CachedPartition] = {}

    def apply(self, body) -> None:
        """The request's partitions join or update the session; its forgotten ones leave."""
        held = self.partitions
        for topic in body.topics:
            name = topic.topic
            for asked in topic.partitions:
                cached = held.get((name, asked.partition))
                if cached is None:
                    held[(name, asked.partition)] = CachedPartition(asked)
                else:
                    cached.update(asked)
        for gone in body.forgotten_topics_data or ():
            for index in gone.partitions:
                held.pop((gone.topic, index), None)

    def as_request(self, body) -> SessionRequest:
        by_topic: dict[str, list[CachedPartition]] = {}
        for (name, _), cached in self.partitions.items():
            by_topic.setdefault(name, []).append(cached)
        return SessionRequest(body, [_Topic(n, p) for n, p in by_topic.items()])

    def answered(self, response) -> None:
        """Remember what the answer about to leave told of each partition it holds."""
        held = self.partitions
        for topic in response.responses:
            for data in topic.partitions:
                cached = held.get((topic.topic, data.partition_index))
                if cached is not None:
                    cached.answered(data)


class FetchSessions:
    """One connection's sessions."""

    def __init__(self):
        self._sessions: dict[int, FetchSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def partitions_held(self) -> int:
        return sum(len(s.partitions) for s in self._sessions.values())

    def open(self, body, *, keep: bool) -> tuple[FetchSession | None, object, ErrorCode]:
        """The session a request belongs to (None: a full fetch without one), the request
        as the handler should read it, and an error that refuses the request outright.
        `keep`: whether this request may have a session (a replica's, trusted as one)."""
        epoch = body.session_epoch
        if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
            if body.session_id:
                self._sessions.pop(body.session_id, None)
            if epoch == FINAL_EPOCH or not keep or len(self._sessions) >= MAX_SESSIONS:
                return None, body, ErrorCode.NONE
        elif not keep:
            return None, body, ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if epoch == INITIAL_EPOCH:
            session = FetchSession(self._new_id())
            self._sessions[session.id] = session
            session.apply(body)
            return session, body, ErrorCode.NONE
        session = self._sessions.get(body.session_id)
        if session is None:
            return None, body, ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if epoch != fetch.next_session_epoch(session.epoch):
            return None, body, ErrorCode.INVALID_FETCH_SESSION_EPOCH
        session.epoch = epoch
        session.apply(body)
        return session, session.as_request(body), ErrorCode.NONE

    def close(self) -> None:
        self._sessions.clear()

    def _new_id(self) -> int:
        while True:
            session_id = secrets.randbits(31)
            if session_id and session_id not in self._sessions:
                return session_id


def refusal(code: ErrorCode) -> fetch.Response:
    """A request a session cannot serve: Kafka's top-level error, no partitions."""
    return fetch.Response(throttle_time_ms=0, error_code=int(code), session_id=0,
                          responses=[])
