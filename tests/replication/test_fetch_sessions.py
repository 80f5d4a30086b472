"""KIP-227 fetch sessions, both halves: the follower's requests (replication/fetch_session.py)
fed through the leader's book of its sessions (workers/fetch_sessions.py), each request
encoded and decoded as Fetch v11 on the way, as the wire carries it. The leader's reads and
answers against a real appliance are tests/fleet/test_fetch_sessions.py's."""

from __future__ import annotations

from appliance.workers.fetch_sessions import MAX_SESSIONS, FetchSessions
from appliance.workers.replication.fetch_session import FollowerSession
from klog.protocol.apis import fetch
from klog.protocol.client import ClientConnection
from klog.protocol.error_codes import ErrorCode
from klog.protocol.server import ServerConnection

SETTINGS = dict(replica_id=200, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
                isolation_level=0, rack_id="")


def partition(index: int, offset: int, epoch: int = 3, max_bytes: int = 1 << 20):
    """A position as the fetcher states it: offset, log start, max bytes, leader epoch."""
    return (offset, 0, max_bytes, epoch)


def over_the_wire(request: fetch.Request):
    """The request as the leader decodes it."""
    client, server = ClientConnection(client_id="t"), ServerConnection()
    _, data = client.send_request(fetch.SPEC.key, 11, request)
    server.receive_data(data)
    return server.next_request().body


def named(body) -> dict:
    return {(t.topic, p.partition): p.fetch_offset for t in body.topics for p in t.partitions}


def held(session) -> dict:
    return {key: c.fetch_offset for key, c in session.partitions.items()}


def answer(session_id: int, error: ErrorCode = ErrorCode.NONE, parts=()) -> fetch.Response:
    return fetch.Response(throttle_time_ms=0, error_code=int(error), session_id=session_id,
                          responses=[fetch.FetchableTopicResponse(topic=t, partitions=[
                              fetch.PartitionData(partition_index=i, error_code=0,
                                                  high_watermark=5, last_stable_offset=5,
                                                  log_start_offset=0, records=None)])
                                     for t, i in parts])


def test_a_session_opens_full_then_names_only_what_moved_and_what_left():
    follower, leader = FollowerSession(), FetchSessions()
    wanted = {("a", 0): partition(0, 10), ("a", 1): partition(1, 20), ("b", 0): partition(0, 5)}

    first = over_the_wire(follower.request(wanted, **SETTINGS))
    assert (first.session_id, first.session_epoch) == (0, 0)
    session, view, error = leader.open(first, keep=True)
    assert error == ErrorCode.NONE and view is first
    assert held(session) == named(first) == {("a", 0): 10, ("a", 1): 20, ("b", 0): 5}
    assert follower.answered(answer(session.id, parts=wanted))

    # nothing moved: the request names nothing, and the leader reads every partition held
    quiet = over_the_wire(follower.request(wanted, **SETTINGS))
    assert (quiet.session_id, quiet.session_epoch) == (session.id, 1)
    assert named(quiet) == {} and quiet.forgotten_topics_data == []
    _, view, error = leader.open(quiet, keep=True)
    assert error == ErrorCode.NONE and named(view) == {("a", 0): 10, ("a", 1): 20, ("b", 0): 5}
    assert view.max_wait_ms == 500 and view.replica_id == 200

    # one moved, one new leader epoch, one gone
    wanted = {("a", 0): partition(0, 15), ("a", 1): partition(1, 20, epoch=4)}
    moved = over_the_wire(follower.request(wanted, **SETTINGS))
    assert moved.session_epoch == 2
    assert named(moved) == {("a", 0): 15, ("a", 1): 20}
    assert [(f.topic, f.partitions) for f in moved.forgotten_topics_data] == [("b", [0])]
    _, view, _ = leader.open(moved, keep=True)
    assert named(view) == {("a", 0): 15, ("a", 1): 20}
    assert session.partitions[("a", 1)].current_leader_epoch == 4
    assert session.partitions[("a", 0)].partition_max_bytes == 1 << 20


def test_epochs_out_of_order_or_unknown_sessions_are_refused_as_kafka_does():
    leader = FetchSessions()
    wanted = {("a", 0): partition(0, 0)}
    follower = FollowerSession()
    session, _, _ = leader.open(over_the_wire(follower.request(wanted, **SETTINGS)), keep=True)
    follower.answered(answer(session.id))
    follower.request(wanted, **SETTINGS)  # epoch 1, lost on the way
    skipped = over_the_wire(follower.request(wanted, **SETTINGS))
    assert skipped.session_epoch == 2
    assert leader.open(skipped, keep=True)[2] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    stranger = fetch.Request(session_id=session.id + 1, session_epoch=1, topics=[],
                             forgotten_topics_data=[], **SETTINGS)
    assert leader.open(stranger, keep=True)[2] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND

    # the follower starts over with a full request, which opens a new session
    assert not follower.answered(answer(0, ErrorCode.INVALID_FETCH_SESSION_EPOCH))
    again = over_the_wire(follower.request(wanted, **SETTINGS))
    assert (again.session_id, again.session_epoch) == (0, 0) and named(again) == {("a", 0): 0}
    assert leader.open(again, keep=True)[0] is not None


def test_epoch_minus_one_closes_and_zero_replaces_a_named_session():
    leader = FetchSessions()
    body = over_the_wire(FollowerSession().request({("a", 0): partition(0, 0)}, **SETTINGS))
    first = leader.open(body, keep=True)[0]
    closing = fetch.Request(session_id=first.id, session_epoch=-1, topics=body.topics,
                            forgotten_topics_data=[], **SETTINGS)
    session, view, error = leader.open(closing, keep=True)
    assert session is None and view is closing and error == ErrorCode.NONE and len(leader) == 0
    second = leader.open(body, keep=True)[0]
    replacing = fetch.Request(session_id=second.id, session_epoch=0, topics=body.topics,
                              forgotten_topics_data=[], **SETTINGS)
    third = leader.open(replacing, keep=True)[0]
    assert third.id != second.id and len(leader) == 1
    incremental = fetch.Request(session_id=second.id, session_epoch=1, topics=[],
                                forgotten_topics_data=[], **SETTINGS)
    assert leader.open(incremental, keep=True)[2] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_consumers_untrusted_replicas_and_requests_past_the_limit_get_no_session():
    leader = FetchSessions()
    consumer = fetch.Request(session_id=0, session_epoch=0, topics=[], forgotten_topics_data=[],
                             **{**SETTINGS, "replica_id": -1})
    assert leader.open(consumer, keep=False)[0] is None and len(leader) == 0
    untrusted = fetch.Request(session_id=5, session_epoch=1, topics=[],
                              forgotten_topics_data=[], **SETTINGS)
    assert leader.open(untrusted, keep=False)[2] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    body = over_the_wire(FollowerSession().request({("a", 0): partition(0, 0)}, **SETTINGS))
    for _ in range(MAX_SESSIONS):
        assert leader.open(body, keep=True)[0] is not None
    session, view, error = leader.open(body, keep=True)
    assert session is None and view is body and error == ErrorCode.NONE

    # a follower answered session id 0 keeps sending full requests
    follower = FollowerSession()
    wanted = {("a", 0): partition(0, 0)}
    follower.request(wanted, **SETTINGS)
    assert follower.answered(answer(0))
    full = follower.request(wanted, **SETTINGS)
    assert (full.session_id, full.session_epoch) == (0, 0) and named(full) == {("a", 0): 0}


def test_the_leader_remembers_what_each_answer_told():
    leader = FetchSessions()
    body = over_the_wire(FollowerSession().request({("a", 0): partition(0, 0)}, **SETTINGS))
    session = leader.open(body, keep=True)[0]
    cached = session.partitions[("a", 0)]

    class Log:
        high_watermark, last_stable_offset, log_start_offset = 5, 5, 0

    assert not cached.unchanged(Log)
    session.answered(answer(session.id, parts=[("a", 0)]))
    assert cached.unchanged(Log)
    Log.high_watermark = 6
    assert not cached.unchanged(Log)


def test_epochs_wrap_past_the_largest_int32_to_one():
    assert fetch.next_session_epoch(1) == 2 and fetch.next_session_epoch(2**31 - 1) == 1
    follower = FollowerSession()
    follower.session_id, follower.epoch = 7, 2**31 - 1
    assert follower.request({}, **SETTINGS).session_epoch == 2**31 - 1
    assert follower.epoch == 1
