"""A follower's half of a KIP-227 fetch session with one leader, over one connection.

Why: an idle follower fetches every `replica.fetch.wait.max.ms`, and without a session each
request names, and each answer carries, every partition it copies from that leader: at a few
thousand replicas that was most of an idle fleet's CPU (the leader's half,
`appliance/workers/fetch_sessions.py`, says more). In a session a request names only the
partitions added or moved since the last request (position, log start, size limit, leader
epoch), and `forgotten_topics_data` the ones no longer fetched (gone, refused and waiting,
throttled); the answer leaves out every partition with nothing new, which the fetcher reads
as "nothing came".

The first request of a connection opens the session (epoch 0, every partition). A leader that
keeps none (an older klog, or one at its limit) answers session id 0, and every request stays
a full one, as before sessions. A leader that lost the session (FETCH_SESSION_ID_NOT_FOUND,
INVALID_FETCH_SESSION_EPOCH) gets a full request again. Requests leave in the order they are
built (one connection, and a pipelined request is built after the answer before it arrived),
so each epoch follows the one before.
"""

from __future__ import annotations

from klog.protocol.apis import fetch
from klog.protocol.error_codes import ErrorCode

INITIAL_EPOCH = fetch.INITIAL_SESSION_EPOCH


class FollowerSession:
    def __init__(self):
        self.session_id = 0  # 0: none yet, the next request opens one
        self.epoch = INITIAL_EPOCH  # of the next request
        self._sent: dict[tuple[str, int], tuple] = {}  # what the leader's session holds

    def request(self, positions: dict[tuple[str, int], tuple[int, int, int, int]],
                **settings) -> fetch.Request:
        """The Fetch for `positions` (key -> fetch offset, log start, partition max bytes,
        current leader epoch: what a full request would name). `settings`: the request's
        other fields (replica_id, max_wait_ms, ...)."""
        if self.session_id == 0:
            named, forgotten = list(positions), []
        else:
            sent = self._sent
            named = [key for key, at in positions.items() if sent.get(key) != at]
            forgotten = [key for key in sent if key not in positions]
        self._sent = positions
        epoch = self.epoch
        if self.session_id:
            self.epoch = fetch.next_session_epoch(epoch)
        return fetch.Request(
            session_id=self.session_id, session_epoch=epoch,
            topics=_by_topic(named, lambda key: _partition(key[1], positions[key]),
                             fetch.FetchTopic),
            forgotten_topics_data=_by_topic(forgotten, lambda key: key[1],
                                            fetch.ForgottenTopic),
            **settings)

    def answered(self, response) -> bool:
        """Take the session id an answer gives; False if the answer is a refusal of the
        whole request (the leader lost the session, or any other top-level error): it holds
        nothing, and the next request is a full one."""
        if response.error_code != ErrorCode.NONE:
            self.reset()
            return False
        if self.session_id == 0:
            self.session_id = response.session_id
            self.epoch = 1 if response.session_id else INITIAL_EPOCH
        elif response.session_id != self.session_id:  # the leader closed it
            self.reset()
            return False
        return True

    def reset(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._sent = {}


def _partition(index: int, position: tuple[int, int, int, int]) -> fetch.FetchPartition:
    fetch_offset, log_start, max_bytes, leader_epoch = position
    return fetch.FetchPartition(partition=index, current_leader_epoch=leader_epoch,
                                fetch_offset=fetch_offset, log_start_offset=log_start,
                                partition_max_bytes=max_bytes)


def _by_topic(keys, item, make):
    topics: dict[str, list] = {}
    for key in keys:
        topics.setdefault(key[0], []).append(item(key))
    return [make(topic=t, partitions=p) for t, p in topics.items()]
