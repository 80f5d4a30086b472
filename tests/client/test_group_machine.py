"""The consumer's group membership state machine without a broker, driven by hand through
the sans-IO protocol object."""

from __future__ import annotations

import re
import struct

import pytest

from klog.config import ConsumerConfig, build
from klog.consumer.consumer_machine import ConsumerProtocol
from klog.consumer.group import Assign, CommitDone, Revoke
from klog.errors import CommitFailedError
from klog.protocol.apis import (
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    sync_group,
)
from klog.protocol.error_codes import ErrorCode
from klog.protocol.group_assignment import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from klog.types import OffsetAndMetadata, TopicPartition
from tests.client.fakes import metadata_answer, offsets_answer, tps

TP = TopicPartition

NOW = 1_000_000


def make(**options) -> ConsumerProtocol:
    config = build(ConsumerConfig, "Consumer", {
        "bootstrap_servers": "h:1", "group_id": "g", "heartbeat_interval_ms": 1000,
        "session_timeout_ms": 10_000, "max_poll_interval_ms": 60_000, **options})
    return ConsumerProtocol(config)


def pick(requests, api):
    (request,) = [r for r in requests if r.api is api]
    return request


def apis(requests):
    return sorted(r.api.SPEC.name for r in requests)


def answer(core, request, now=NOW, **fields):
    core.on_response(request, request.api.Response(**fields), now)


def events(core):
    out = []
    while (event := core.group.next_event()) is not None:
        out.append(event)
    return out


def find(core, now=NOW):
    request = pick(core.poll(now), find_coordinator)
    assert (request.body.key, request.body.key_type, request.node) == ("g", 0, None)
    answer(core, request, now, node_id=7, host="127.0.0.1", port=9007)
    assert core.address_of(7) == ("127.0.0.1", 9007)


def join_answer(request, member_id="m1", generation=1, leader="other", members=(), **kw):
    return join_group.Response(error_code=kw.get("error", 0), generation_id=generation,
                               protocol_name=kw.get("protocol", "range"), leader=leader,
                               member_id=member_id, members=list(members))


def stable(core, partitions=(), now=NOW, generation=1, protocol="range"):
    """Subscribed core -> STABLE as a follower holding ``partitions``."""
    core.group.app_polled(now)
    if not core.group.coordinator.known:
        find(core, now)
    join = pick(core.poll(now), join_group)
    core.on_response(join, join_answer(join, generation=generation, protocol=protocol), now)
    sync = pick(core.poll(now), sync_group)
    assert sync.body.assignments == [] and sync.body.generation_id == generation
    data = encode_assignment([(tp.topic, tp.partition) for tp in partitions])
    answer(core, sync, now, assignment=data)
    return events(core)


def test_join_sync_and_heartbeat_as_kafka_does():
    core = make(group_instance_id="inst-1")
    core.group.subscribe(topics=["t"])
    core.group.app_polled(NOW)
    find(core)
    join = pick(core.poll(NOW), join_group)
    body = join.body
    assert (body.group_id, body.session_timeout_ms, body.rebalance_timeout_ms) == (
        "g", 10_000, 60_000)
    assert (body.member_id, body.group_instance_id, body.protocol_type) == ("", "inst-1",
                                                                            "consumer")
    assert [p.name for p in body.protocols] == ["range", "roundrobin"]
    sub = decode_subscription(body.protocols[0].metadata)
    assert (sub.version, sub.topics, sub.owned_partitions, sub.generation_id) == (
        3, ["t"], {}, -1)
    assert (join.node, join.channel, join.timeout_ms) == (7, "group", 65_000)
    answer(core, join, error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id="m-42")  # KIP-394
    again = pick(core.poll(NOW), join_group)
    assert again.body.member_id == "m-42"
    core.on_response(again, join_answer(again, member_id="m-42", generation=3), NOW)
    sync = pick(core.poll(NOW), sync_group)
    assert (sync.body.member_id, sync.body.group_instance_id, sync.channel) == (
        "m-42", "inst-1", "group")
    answer(core, sync, assignment=encode_assignment({"t": [1, 0]}))
    assert events(core) == [Assign(frozenset(tps("tp0 tp1")))]
    assert set(core.assignment.states) == set(tps("tp0 tp1"))
    assert not [r for r in core.poll(NOW + 999) if r.api is heartbeat]
    beat = pick(core.poll(NOW + 1000), heartbeat)
    assert (beat.body.generation_id, beat.body.member_id, beat.body.group_instance_id) == (
        3, "m-42", "inst-1")
    assert not [r for r in core.poll(NOW + 2500) if r.api is heartbeat]  # one in flight


def test_new_partitions_start_at_the_committed_offset_else_the_reset():
    core = make(auto_offset_reset="earliest")
    core.group.subscribe(topics=["t"])
    first = core.poll(NOW)
    assert apis(first) == ["FindCoordinator", "Metadata"]
    core.on_response(pick(first, metadata), metadata_answer({"t": 2}), NOW)
    answer(core, pick(first, find_coordinator), node_id=7, host="h", port=1)
    stable(core, tps("tp0 tp1"))
    request = pick(core.poll(NOW), offset_fetch)
    assert [(t.name, t.partition_indexes) for t in request.body.topics] == [("t", [0, 1])]
    assert not [r for r in core.poll(NOW) if r.api is list_offsets]  # committed first
    answer(core, request, topics=[offset_fetch.OffsetFetchResponseTopic(name="t", partitions=[
        offset_fetch.OffsetFetchResponsePartition(partition_index=0, committed_offset=42),
        offset_fetch.OffsetFetchResponsePartition(partition_index=1, committed_offset=-1)])])
    assert core.position(TP("t", 0)) == 42 and core.position(TP("t", 1)) is None
    lookup = pick(core.poll(NOW), list_offsets)
    assert lookup.body.topics[0].partitions[0].timestamp == -2  # earliest, for t[1] only
    core.on_response(lookup, offsets_answer(lookup, {("t", 1): 3}), NOW)
    assert core.position(TP("t", 1)) == 3


def test_a_seek_wins_over_the_committed_offset():
    core = make()
    core.assign([TP("t", 0)])
    request = next(r for r in core.poll(NOW) if r.api is find_coordinator)
    answer(core, request, node_id=7, host="h", port=1)
    fetch_request = pick(core.poll(NOW), offset_fetch)
    core.seek(TP("t", 0), 5)
    answer(core, fetch_request, topics=[offset_fetch.OffsetFetchResponseTopic(
        name="t", partitions=[offset_fetch.OffsetFetchResponsePartition(
            partition_index=0, committed_offset=42)])])
    assert core.position(TP("t", 0)) == 5


def test_rebalance_in_progress_revokes_everything_first_with_the_eager_protocol():
    core = make()
    core.group.subscribe(topics=["t"])
    stable(core, tps("tp0 tp1"))
    beat = pick(core.poll(NOW + 1000), heartbeat)
    answer(core, beat, NOW + 1000, error_code=ErrorCode.REBALANCE_IN_PROGRESS)
    assert not [r for r in core.poll(NOW + 1000) if r.api is join_group]  # not before revoke
    (revoke,) = events(core)
    assert revoke == Revoke(frozenset(tps("tp0 tp1")))
    assert core.group.membership.identity()[:2] == (1, "m1")  # may still commit
    core.group.revoked(revoke)
    assert core.assignment.states == {}
    join = pick(core.poll(NOW + 1000), join_group)
    sub = decode_subscription(join.body.protocols[0].metadata)
    assert (join.body.member_id, sub.generation_id, sub.owned_partitions) == ("m1", 1, {})


@pytest.mark.parametrize("code", [ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION])
def test_a_fenced_member_loses_its_partitions_and_joins_anew(code):
    core = make()
    core.group.subscribe(topics=["t"])
    stable(core, tps("tp0"))
    answer(core, pick(core.poll(NOW + 1000), heartbeat), NOW + 1000, error_code=code)
    core.poll(NOW + 1000)
    (lost,) = events(core)
    assert lost == Revoke(frozenset(tps("tp0")), lost=True)
    assert isinstance(core.group.membership.identity(), CommitFailedError)
    core.group.revoked(lost)
    join = pick(core.poll(NOW + 1000), join_group)
    assert join.body.member_id == ""


def test_a_background_heartbeat_answered_after_our_rejoin_began_loses_nothing():
    """Seen in CI: the heartbeat thread's connection answered ILLEGAL_GENERATION for the
    generation our in-flight JoinGroup was replacing; the member must not count as lost."""
    core = make(partition_assignment_strategy=["cooperative-sticky"])
    core.group.subscribe(topics=["t"])
    stable(core, tps("tp0 tp1"), protocol="cooperative-sticky")
    core.group.membership.request_rejoin("a member left")
    join = pick(core.poll(NOW + 10), join_group)
    core.group.membership.on_background_heartbeat(ErrorCode.ILLEGAL_GENERATION, 1, "m1",
                                                  NOW + 20)
    assert events(core) == []  # nothing revoked as lost
    core.on_response(join, join_answer(join, generation=2, protocol="cooperative-sticky"),
                     NOW + 30)
    sync = pick(core.poll(NOW + 30), sync_group)
    assert (sync.body.generation_id, sync.body.member_id) == (2, "m1")


def test_a_moved_coordinator_is_found_again_and_the_membership_kept():
    core = make()
    core.group.subscribe(topics=["t"])
    stable(core, tps("tp0"))
    answer(core, pick(core.poll(NOW + 1000), heartbeat), NOW + 1000,
           error_code=ErrorCode.NOT_COORDINATOR)
    assert not core.group.coordinator.known
    request = pick(core.poll(NOW + 1100), find_coordinator)
    answer(core, request, NOW + 1100, node_id=8, host="h", port=2)
    beat = pick(core.poll(NOW + 2000), heartbeat)
    assert (beat.node, beat.body.generation_id, beat.body.member_id) == (8, 1, "m1")
    assert events(core) == []


def test_the_leader_assigns_with_the_chosen_assignor_once_metadata_covers_the_group():
    core = make(max_poll_interval_ms=1_000_000)
    core.group.subscribe(topics=["t"])
    core.group.app_polled(NOW)
    first = core.poll(NOW)
    core.on_response(pick(first, metadata), metadata_answer({"t": 2}), NOW)
    answer(core, pick(first, find_coordinator), node_id=7, host="h", port=1)
    join = pick(core.poll(NOW), join_group)
    ours = join.body.protocols[1].metadata  # roundrobin's
    theirs = encode_subscription(["t", "u"], version=0)
    core.on_response(join, join_answer(join, member_id="m1", leader="m1", protocol="roundrobin",
                                       members=[
        join_group.JoinGroupResponseMember(member_id="m1", metadata=ours),
        join_group.JoinGroupResponseMember(member_id="m2", metadata=theirs)]), NOW)
    requests = core.poll(NOW)
    assert apis(requests) == ["Metadata"]  # "u" is only the other member's topic
    assert [t.name for t in requests[0].body.topics] == ["t", "u"]
    core.on_response(requests[0], metadata_answer({"t": 2, "u": 1}), NOW)
    sync = pick(core.poll(NOW), sync_group)
    got = {a.member_id: decode_assignment(a.assignment) for a in sync.body.assignments}
    assert got["m1"].partitions == {"t": [0]} and got["m2"].partitions == {"t": [1], "u": [0]}
    assert got["m2"].version == 0  # in the version the member spoke
    answer(core, sync, assignment=encode_assignment({"t": [0]}))
    events(core)
    more = core.poll(NOW + 400_000)  # the metadata refresh shows a new partition
    core.on_response(pick(more, metadata), metadata_answer({"t": 3, "u": 1}), NOW + 400_000)
    core.poll(NOW + 400_000)
    assert events(core) == [Revoke(frozenset(tps("tp0")))]  # eager: rejoin, revoke first


def test_cooperative_member_revokes_only_what_moved_then_rejoins():
    core = make(partition_assignment_strategy=["cooperative-sticky"])
    core.group.subscribe(topics=["t"])
    assert stable(core, tps("tp0 tp1"), protocol="cooperative-sticky") == [
        Assign(frozenset(tps("tp0 tp1")))]
    answer(core, pick(core.poll(NOW + 1000), heartbeat), NOW + 1000,
           error_code=ErrorCode.REBALANCE_IN_PROGRESS)
    join = pick(core.poll(NOW + 1000), join_group)  # nothing revoked before joining
    assert [p.name for p in join.body.protocols] == ["cooperative-sticky"]
    sub = decode_subscription(join.body.protocols[0].metadata)
    assert (sub.owned_partitions, sub.generation_id, sub.user_data) == (
        {"t": [0, 1]}, 1, struct.pack(">i", 1))
    assert set(core.assignment.states) == set(tps("tp0 tp1"))  # still fetching them
    core.on_response(join, join_answer(join, generation=2, protocol="cooperative-sticky"),
                     NOW + 1000)
    sync = pick(core.poll(NOW + 1000), sync_group)
    answer(core, sync, NOW + 1000, assignment=encode_assignment({"t": [1]}))
    revoke, assign = events(core)
    assert (revoke, assign) == (Revoke(frozenset(tps("tp0")), rejoin=True), Assign(frozenset()))
    assert set(core.assignment.states) == set(tps("tp0 tp1"))  # until the listener ran
    core.group.revoked(revoke)
    assert set(core.assignment.states) == set(tps("tp1"))
    again = pick(core.poll(NOW + 1000), join_group)
    assert decode_subscription(again.body.protocols[0].metadata).owned_partitions == {
        "t": [1]}


def test_commits_carry_the_generation_or_are_simple():
    core = make()
    core.group.subscribe(topics=["t"])
    stable(core, tps("tp0"), generation=4)
    done = []
    pending = core.group.commit({TP("t", 0): OffsetAndMetadata(10, "m")}, retry=False,
                                callback=lambda offsets, error: done.append(error))
    request = pick(core.poll(NOW), offset_commit)
    body = request.body
    assert (body.generation_id_or_member_epoch, body.member_id) == (4, "m1")
    partition = body.topics[0].partitions[0]
    assert (partition.committed_offset, partition.committed_metadata) == (10, "m")
    answer(core, request, topics=[offset_commit.OffsetCommitResponseTopic(name="t", partitions=[
        offset_commit.OffsetCommitResponsePartition(partition_index=0)])])
    assert pending.done and pending.error is None
    assert events(core) == [CommitDone(pending)]
    simple = make()
    simple.assign([TP("t", 0)])
    find(simple)
    simple.group.commit({TP("t", 0): OffsetAndMetadata(3)}, retry=True)
    body = pick(simple.poll(NOW), offset_commit).body
    assert (body.generation_id_or_member_epoch, body.member_id, body.group_instance_id) == (
        -1, "", None)


def test_commit_errors_as_java_treats_them():
    core = make()
    core.group.subscribe(topics=["t"])
    stable(core, tps("tp0"))
    sync_commit = core.group.commit({TP("t", 0): OffsetAndMetadata(1)}, retry=True)
    request = pick(core.poll(NOW), offset_commit)
    error = offset_commit.OffsetCommitResponsePartition(
        partition_index=0, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    answer(core, request, topics=[offset_commit.OffsetCommitResponseTopic(
        name="t", partitions=[error])])
    assert not sync_commit.done  # retried after the backoff
    request = pick(core.poll(NOW + 100), offset_commit)
    error.error_code = ErrorCode.ILLEGAL_GENERATION
    answer(core, request, topics=[offset_commit.OffsetCommitResponseTopic(
        name="t", partitions=[error])])
    assert isinstance(sync_commit.error, CommitFailedError)
    assert core.group.membership.generation == -1  # and the membership is gone
    refused = core.group.commit({TP("t", 0): OffsetAndMetadata(1)}, retry=True)
    core.poll(NOW)
    assert isinstance(refused.error, CommitFailedError)  # not a member: refused at once


def test_no_poll_for_max_poll_interval_leaves_the_group():
    core = make()
    core.group.subscribe(topics=["t"])
    stable(core, tps("tp0"))
    core.group.app_polled(NOW + 60_001)
    requests = core.poll(NOW + 60_001)
    leave = pick(requests, leave_group)
    assert leave.body.member_id == "m1" and leave.body.members[0].member_id == "m1"
    assert events(core) == [Revoke(frozenset(tps("tp0")), lost=True)]
    static = make(group_instance_id="i")
    static.group.subscribe(topics=["t"])
    stable(static, tps("tp0"))
    static.group.app_polled(NOW + 60_001)
    assert not [r for r in static.poll(NOW + 60_001) if r.api is leave_group]


def test_a_pattern_is_matched_against_every_topic_and_rejoins_on_change():
    core = make()
    core.group.subscribe(pattern=re.compile(r"logs-.*"))
    core.group.app_polled(NOW)
    requests = core.poll(NOW)
    request = pick(requests, metadata)
    assert request.body.topics is None  # all topics
    answer(core, pick(requests, find_coordinator), node_id=7, host="h", port=1)
    assert not [r for r in core.poll(NOW) if r.api is join_group]  # not before matching
    core.on_response(request, metadata_answer({"logs-a": 1, "other": 1, "xlogs-b": 1}), NOW)
    join = pick(core.poll(NOW), join_group)
    assert decode_subscription(join.body.protocols[0].metadata).topics == ["logs-a"]
    core.on_response(join, join_answer(join), NOW)
    answer(core, pick(core.poll(NOW), sync_group), assignment=encode_assignment({"logs-a": [0]}))
    events(core)
    core.group.app_polled(NOW + 300_000)
    refresh = pick(core.poll(NOW + 300_000), metadata)
    core.on_response(refresh, metadata_answer({"logs-a": 1, "logs-b": 2}), NOW + 300_000)
    core.poll(NOW + 300_000)
    (revoke,) = events(core)
    core.group.revoked(revoke)
    join = pick(core.poll(NOW + 300_000), join_group)
    assert decode_subscription(join.body.protocols[0].metadata).topics == ["logs-a", "logs-b"]


def test_leave_on_close_is_for_dynamic_members_only():
    core = make()
    core.group.subscribe(topics=["t"])
    stable(core, tps("tp0"))
    leave = core.group.unsubscribe()
    assert leave is not None and pick(core.poll(NOW), leave_group) is leave
    answer(core, leave)
    assert core.group.membership.leaving is None
    static = make(group_instance_id="i")
    static.group.subscribe(topics=["t"])
    stable(static, tps("tp0"))
    assert static.group.unsubscribe() is None


def test_group_options_are_validated_and_normalized():
    config = build(ConsumerConfig, "Consumer", {
        "bootstrap_servers": "h:1", "group_id": "g",
        "partition_assignment_strategy": "range, cooperative-sticky"})
    assert config.partition_assignment_strategy == ("range", "cooperative-sticky")
    assert config.auto_commit and (config.session_timeout_ms, config.heartbeat_interval_ms,
                                   config.max_poll_interval_ms) == (45_000, 3_000, 300_000)
    assert not build(ConsumerConfig, "Consumer", {"bootstrap_servers": "h:1"}).auto_commit
    for options, name in (({"partition_assignment_strategy": ["sticky"]},
                           "partition_assignment_strategy"),
                          ({"heartbeat_interval_ms": 50_000}, "heartbeat_interval_ms"),
                          ({"group_id": None, "group_instance_id": "i"}, "group_instance_id"),
                          ({"group_id": ""}, "group_id")):
        with pytest.raises(ValueError, match=name):
            build(ConsumerConfig, "Consumer", {"bootstrap_servers": "h:1", "group_id": "g",
                                               **options})


def test_subscribe_needs_a_group_and_excludes_assign():
    import klog

    with klog.Consumer(bootstrap_servers="127.0.0.1:1") as lone:
        with pytest.raises(ValueError, match="group_id"):
            lone.subscribe(["t"])
        with pytest.raises(ValueError, match="group_id"):
            lone.commit()
    with klog.Consumer(bootstrap_servers="127.0.0.1:1", group_id="g") as consumer:
        consumer.subscribe("t")
        assert consumer.subscription() == {"t"}
        with pytest.raises(ValueError, match="exclude"):
            consumer.assign([TP("t", 0)])
        with pytest.raises(ValueError, match="topics or a pattern"):
            consumer.subscribe(["t"], pattern="t.*")
        consumer.subscribe(pattern="logs-.*")  # replaces the list
        assert consumer.subscription() == set()  # nothing matched yet
    with klog.Consumer(bootstrap_servers="127.0.0.1:1", group_id="g") as consumer:
        consumer.assign([TP("t", 0)])
        with pytest.raises(ValueError, match="exclude"):
            consumer.subscribe(["t"])
