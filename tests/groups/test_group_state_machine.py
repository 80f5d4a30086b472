"""The coordinator's group state machine on its own: Kafka's classic rebalance rules, driven
with an explicit clock (the real clients drive it in test_group_interop.py)."""

from __future__ import annotations

import pytest

from appliance.workers.groups.group import Group, GroupLimits, JoinResult, SyncResult
from appliance.workers.groups.offsets_log import (
    Committed,
    LoadedPartition,
    group_record,
    java_string_hash,
    offset_record,
    partition_for,
    snapshot_records,
)
from appliance.workers.groups.state import TRANSITIONS, GroupState, IllegalTransition
from klog.protocol.error_codes import ErrorCode

S = GroupState
SESSION = 10_000
REBALANCE = 30_000


class Answers:
    """Collects what the group answers, now or later."""

    def __init__(self):
        self.got: list = []

    def __call__(self, result):
        self.got.append(result)

    @property
    def last(self):
        return self.got[-1] if self.got else None


def join(group, now, member_id="", instance=None, protocols=(("range", b"r"),),
         known_required=False):
    answer = Answers()
    group.join(member_id=member_id, instance_id=instance, client_id="c", client_host="/h",
               session_timeout_ms=SESSION, rebalance_timeout_ms=REBALANCE,
               protocol_type="consumer", protocols=list(protocols),
               require_known_member_id=known_required, respond=answer, now_ms=now)
    return answer


def sync(group, now, member_id, generation, assignments=None):
    answer = Answers()
    group.sync(member_id=member_id, instance_id=None, generation=generation,
               assignments=assignments or {}, respond=answer, now_ms=now)
    return answer


def new_group(delay=0):
    return Group("g", GroupLimits(initial_rebalance_delay_ms=delay))


def stable_pair(group):
    """Two members in a stable generation; returns their ids."""
    a = join(group, 0)
    a_id = a.last.member_id
    sync(group, 0, a_id, 1, {a_id: b"A1"})
    b = join(group, 10)
    assert b.last is None and group.state is S.PREPARING_REBALANCE
    assert group.heartbeat(member_id=a_id, instance_id=None, generation=1, now_ms=20) \
        is ErrorCode.REBALANCE_IN_PROGRESS
    a2 = join(group, 30, a_id)
    b_id = b.last.member_id
    assert a2.last.generation == b.last.generation == 2
    sa, sb = sync(group, 40, b_id, 2), sync(group, 40, a_id, 2, {a_id: b"A", b_id: b"B"})
    assert group.state is S.STABLE
    assert sa.last == SyncResult(ErrorCode.NONE, b"B") and sb.last.assignment == b"A"
    return a_id, b_id


def test_every_transition_the_table_forbids_raises():
    for current in S:
        for target in S:
            group = new_group()
            group.state = current
            if target in TRANSITIONS[current]:
                group._transition(target)
            else:
                with pytest.raises(IllegalTransition):
                    group._transition(target)


def test_first_member_leads_and_gets_the_member_list():
    group = new_group()
    answer = join(group, 0)
    result = answer.last
    assert result.error is ErrorCode.NONE and result.generation == 1
    assert result.leader == result.member_id and result.protocol == "range"
    assert result.members == ((result.member_id, None, b"r"),)
    assert group.state is S.COMPLETING_REBALANCE


def test_a_second_member_waits_until_the_first_rejoins_and_only_the_leader_sees_members():
    group = new_group()
    a_id, b_id = stable_pair(group)
    assert group.leader == a_id
    assert set(group.members) == {a_id, b_id}


def test_kip_394_new_member_must_come_back_with_its_id():
    group = new_group()
    first = join(group, 0, known_required=True)
    assert first.last.error is ErrorCode.MEMBER_ID_REQUIRED
    assert group.state is S.EMPTY and first.last.member_id in group.pending
    second = join(group, 1, first.last.member_id, known_required=True)
    assert second.last.error is ErrorCode.NONE and second.last.member_id == first.last.member_id


def test_initial_delay_holds_the_first_generation_for_late_joiners():
    group = new_group(delay=3000)
    a = join(group, 0)
    b = join(group, 1000)
    assert a.last is None and b.last is None
    group.tick(3500)  # extended by b's arrival: 1000 + 3000
    assert a.last is None
    group.tick(4000)
    assert a.last.generation == b.last.generation == 1 and len(a.last.members) == 2


def test_protocol_is_the_common_one_with_most_first_choices():
    group = new_group(delay=100)
    join(group, 0, protocols=(("range", b""), ("roundrobin", b"")))
    join(group, 0, protocols=(("roundrobin", b""),))
    join(group, 0, protocols=(("cooperative-sticky", b""), ("roundrobin", b""), ("range", b"")))
    group.tick(100)
    assert group.protocol == "roundrobin"


def test_a_member_without_a_common_protocol_is_refused():
    group = new_group()
    join(group, 0, protocols=(("range", b""),))
    refused = join(group, 1, protocols=(("roundrobin", b""),))
    assert refused.last.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_session_timeout_removes_a_silent_member_and_rebalances():
    group = new_group()
    a_id, b_id = stable_pair(group)
    group.heartbeat(member_id=a_id, instance_id=None, generation=2, now_ms=SESSION)
    group.tick(40 + SESSION)  # b has been silent since its sync at 40
    assert b_id not in group.members and group.state is S.PREPARING_REBALANCE
    rejoin = join(group, 40 + SESSION + 1, a_id)
    assert rejoin.last.generation == 3 and rejoin.last.members == ((a_id, None, b"r"),)


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    group = new_group()
    a_id, b_id = stable_pair(group)
    leave = group.leave(member_id="nobody", instance_id=None, now_ms=50)
    assert leave is ErrorCode.UNKNOWN_MEMBER_ID
    c = join(group, 100)
    a = join(group, 110, a_id)  # b never rejoins
    assert a.last is None and c.last is None
    group.tick(100 + REBALANCE)
    assert a.last.generation == 3 and b_id not in group.members


def test_stale_generations_and_unknown_members_are_fenced():
    group = new_group()
    a_id, _ = stable_pair(group)
    hb = dict(instance_id=None, now_ms=60)
    assert group.heartbeat(member_id=a_id, generation=1, **hb) is ErrorCode.ILLEGAL_GENERATION
    assert group.heartbeat(member_id="x", generation=2, **hb) is ErrorCode.UNKNOWN_MEMBER_ID
    assert group.heartbeat(member_id=a_id, generation=2, **hb) is ErrorCode.NONE
    assert sync(group, 60, a_id, 1).last.error is ErrorCode.ILLEGAL_GENERATION


def test_leave_of_the_last_member_empties_the_group():
    group = new_group()
    a = join(group, 0)
    member_id = a.last.member_id
    sync(group, 0, member_id, 1, {member_id: b"x"})
    assert group.leave(member_id=member_id, instance_id=None, now_ms=5) is ErrorCode.NONE
    assert group.state is S.EMPTY and group.generation == 2


def test_static_member_restart_keeps_its_assignment_without_a_rebalance():
    group = new_group()
    a = join(group, 0, instance="i-a")
    a_id = a.last.member_id
    b = join(group, 1, instance="i-b")
    join(group, 2, a_id, instance="i-a")
    b_id = b.last.member_id
    sync(group, 3, b_id, 2)
    sync(group, 3, a_id, 2, {a_id: b"A", b_id: b"B"})
    generation = group.generation
    restarted = join(group, 100, instance="i-b")  # a new process: no member id
    result = restarted.last
    assert result.error is ErrorCode.NONE and result.generation == generation
    assert result.member_id != b_id and result.leader == a_id
    assert group.state is S.STABLE
    assert sync(group, 101, result.member_id, generation).last.assignment == b"B"
    # the old incarnation is fenced
    old = group.heartbeat(member_id=b_id, instance_id="i-b", generation=generation, now_ms=102)
    assert old is ErrorCode.UNKNOWN_MEMBER_ID


def test_a_static_leader_restart_is_not_told_it_leads():
    group = new_group()
    a = join(group, 0, instance="i-a")
    a_id = a.last.member_id
    sync(group, 0, a_id, 1, {a_id: b"A"})
    again = join(group, 10, instance="i-a").last
    assert again.leader == a_id and again.member_id != a_id and again.members == ()
    assert group.leader == again.member_id


def test_kill_answers_everyone_waiting():
    group = new_group(delay=1000)
    waiting: Answers = join(group, 0)
    group.kill()
    assert waiting.last == JoinResult(ErrorCode.NOT_COORDINATOR, member_id=waiting.last.member_id)
    assert group.state is S.DEAD


def test_java_string_hash_and_partition_match_kafka():
    # values of "".hashCode() and "hello".hashCode() in Java
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("consumer-group-with-a-long-name") == \
        _java_like("consumer-group-with-a-long-name")
    assert partition_for("hello", 50) == 99162322 % 50


def _java_like(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def test_records_replay_to_the_latest_value_and_snapshots_restate_it():
    group = new_group()
    a = join(group, 0)
    member_id = a.last.member_id
    sync(group, 0, member_id, 1, {member_id: b"\x00\x01"})
    one = Committed(5, -1, "m", 1)
    two = Committed(9, 3, None, 2)
    log = [group_record(group), offset_record("g", "t", 0, one),
           offset_record("g", "t", 0, two), offset_record("g", "t", 1, one),
           offset_record("g", "t", 1, None), (b"not json", b"x")]
    loaded = LoadedPartition()
    loaded.apply_all(log)
    assert loaded.offsets == {"g": {("t", 0): two}} and loaded.skipped == 1
    rebuilt = loaded.build_groups(GroupLimits(), now_ms=1000)["g"]
    assert rebuilt.state is S.STABLE and rebuilt.generation == 1
    assert rebuilt.members[member_id].assignment == b"\x00\x01"
    again = LoadedPartition()
    again.apply_all(snapshot_records([rebuilt], loaded.offsets))
    assert again.offsets == loaded.offsets and again.groups == loaded.groups


def test_a_static_restart_with_new_subscription_bytes_but_the_same_protocol_does_not_rebalance():
    both = (("range", b"gen-1"), ("roundrobin", b"gen-1"))
    group = new_group()
    a = join(group, 0, instance="i-a", protocols=both)
    a_id = a.last.member_id
    b = join(group, 1, instance="i-b", protocols=both)
    join(group, 2, a_id, instance="i-a", protocols=both)
    sync(group, 3, b.last.member_id, 2)
    sync(group, 3, a_id, 2, {a_id: b"A", b.last.member_id: b"B"})
    assert group.protocol == "range"
    again = join(group, 50, instance="i-b", protocols=(("range", b"gen-2"),
                                                       ("roundrobin", b"gen-2"))).last
    assert again.error is ErrorCode.NONE and group.state is S.STABLE
    moved = join(group, 60, instance="i-a", protocols=(("roundrobin", b""),)).last
    assert moved is None and group.state is S.PREPARING_REBALANCE  # the protocol would change
