"""The checker's rules on small hand-made observations: each rule passes a clean run and names
what breaks it. No fleet needed."""

from __future__ import annotations

from tests.faults.checker import (
    Ack,
    Batch,
    GroupEvent,
    Observations,
    Read,
    StateSeen,
    acknowledged_survive,
    check,
    commits_survive,
    consumed_in_order,
    epochs_on_disk,
    one_leader_per_epoch,
    one_record_per_offset,
    order,
    replicas_match_assignment,
)


def reads(partition: int, *values: str, start: int = 0, epoch: int | None = 0) -> list[Read]:
    return [Read(partition, start + i, v, epoch) for i, v in enumerate(values)]


def group_read(member: str, partition: int, offset: int, value: str) -> GroupEvent:
    return GroupEvent(member, "read", partition, offset, value)


def clean() -> Observations:
    """Two producers, one partition, one member that read and committed everything."""
    values = ["c-0", "k-0", "c-1", "k-1"]
    return Observations(
        acks=[Ack("c", 0, 0, 0), Ack("k", 0, 0, 1), Ack("c", 1, 0, 2), Ack("k", 1, 0, 3)],
        idempotent={"c"},
        group=[GroupEvent("m1", "assigned", 0)]
        + [group_read("m1", 0, i, v) for i, v in enumerate(values)]
        + [GroupEvent("m1", "committed", 0, 4), GroupEvent("observer", "observed", 0, 4)],
        final_read={0: reads(0, *values)},
        final_committed={0: 4},
        states=[StateSeen(0, 0, 101, 0, (101, 201)), StateSeen(0, 1, 201, 1, (201,))],
        replicas={"a1": {0: [Batch(0, 1, 0, 11), Batch(2, 3, 0, 12)]},
                  "a2": {0: [Batch(0, 1, 0, 11), Batch(2, 3, 0, 12)]}})


def test_a_clean_run_has_no_violations():
    assert check(clean()) == []


def test_an_acknowledged_record_lost_or_moved():
    seen = clean()
    seen.final_read[0] = reads(0, "c-0", "k-0", "k-1")  # c-1 is gone, k-1 moved up
    found = acknowledged_survive(seen)
    assert "acknowledged c-1 at 0@2 is 'k-1' in the final read" in found
    assert "acknowledged k-1 at 0@3 is missing in the final read" in found


def test_an_acknowledgement_without_an_offset_needs_the_value_in_its_partition():
    seen = clean()
    seen.acks.append(Ack("c", 2, 0, None))
    seen.group.append(group_read("m1", 0, 4, "c-2"))
    assert acknowledged_survive(seen) == [
        "acknowledged c-2 is missing from partition 0 in the final read"]
    seen.final_read[0].append(Read(0, 4, "c-2"))
    assert acknowledged_survive(seen) == []


def test_an_acknowledged_record_the_group_never_read():
    seen = clean()
    seen.group = [e for e in seen.group if e.value != "k-0"]
    assert acknowledged_survive(seen) == [
        "acknowledged k-0 (0@1) was never consumed by the group"]


def test_one_offset_with_two_records():
    seen = clean()
    seen.group.append(group_read("m2", 0, 1, "c-9"))  # a zombie's record, read once
    assert one_record_per_offset(seen) == ["offset 0@1 holds ['c-9', 'k-0']"]


def test_replicas_that_disagree_or_a_record_read_in_another_epoch():
    seen = clean()
    seen.replicas["a3"] = {0: [Batch(0, 1, 0, 11), Batch(2, 3, 1, 99)]}
    found = one_record_per_offset(seen)
    assert any(f.startswith("replicas disagree at 0@2") for f in found), found
    seen = clean()
    seen.final_read[0][3] = Read(0, 3, "k-1", 1)
    assert one_record_per_offset(seen) == [
        "k-1 read at 0@3 in leader epoch 1; the replicas hold epoch [0] there"]


def test_order_and_duplicates():
    seen = clean()
    # a retried batch of the producer that is not idempotent repeats k-0, k-1: allowed
    seen.final_read[0] = reads(0, "c-0", "k-0", "k-1", "k-0", "k-1", "c-1")
    assert order(seen) == []
    seen.final_read[0] = reads(0, "c-1", "c-0")
    assert order(seen) == ["c-0 at 0@1 after c-1: out of order"]
    seen.final_read[0] = reads(0, "c-0", "c-1", "c-0")
    assert order(seen) == [
        "c-0 written 2 times in partition 0 by an idempotent producer, at [0, 2]"]


def test_a_member_skips_or_goes_back_while_it_owns_a_partition():
    events = [GroupEvent("m1", "assigned", 0), group_read("m1", 0, 0, "c-0"),
              group_read("m1", 0, 2, "c-1"),  # skipped 1
              GroupEvent("m1", "revoked", 0), GroupEvent("m1", "assigned", 0),
              group_read("m1", 0, 1, "k-0")]  # a new assignment may start anywhere
    assert consumed_in_order(events) == ["m1 read 0@2 right after 0@0"]


def test_the_assigned_replicas_hold_the_same_batches_and_no_other_holds_any():
    held = [Batch(0, 1, 0, 11), Batch(2, 3, 0, 12)]
    replicas = {"a1": {0: held}, "a2": {0: held}, "a4": {0: held}, "a3": {}}
    assert replicas_match_assignment(replicas, {0: ["a4", "a1", "a2"]}) == []
    assert replicas_match_assignment(replicas, {0: ["a4", "a1", "a3"]}) == [
        "partition 0: no replica on ['a3'], which the assignment names",
        "partition 0: ['a2'] still hold a log of it, outside the assignment "
        "['a1', 'a3', 'a4']"]
    replicas["a4"] = {0: held[:1]}  # a new replica that has not copied everything
    assert replicas_match_assignment(replicas, {0: ["a4", "a1", "a2"]}) == [
        "partition 0: its replicas hold different batches: a1: 2 batches ending at 3; "
        "a2: 2 batches ending at 3; a4: 1 batches ending at 1"]


def test_two_leaders_in_one_epoch_or_an_epoch_going_back():
    states = [StateSeen(0, 0, 101, 0, (101,)), StateSeen(0, 1, 201, 0, (201,)),
              StateSeen(0, 2, 301, 2, (301,)), StateSeen(0, 3, 301, 1, (301,))]
    assert one_leader_per_epoch(states) == [
        "partition 0: leader epoch went from 2 back to 1 (version 3)",
        "partition 0: leader epoch 0 had leaders [101, 201]"]


def test_epochs_and_offsets_on_disk_only_go_up():
    replicas = {"a1": {0: [Batch(0, 1, 2, 1), Batch(2, 3, 1, 2), Batch(5, 5, 2, 3)]}}
    assert epochs_on_disk(replicas) == [
        "a1 partition 0: batch at 2 has epoch 1 after epoch 2",
        "a1 partition 0: batch at 5 follows one ending at 3"]


def commit(member: str, partition: int, offset: int, attempt: str, *, acked: bool = True):
    """A commit attempt's two journal events."""
    return [GroupEvent(member, "committing", partition, offset, attempt),
            GroupEvent(member, "committed" if acked else "commit-failed", partition, offset,
                       attempt)]


def test_committed_offsets_go_back_or_are_lost():
    seen = clean()
    seen.group += [GroupEvent("observer", "observed", 0, 3)]
    seen.final_committed = {0: 2}
    assert commits_survive(seen) == [
        "the group's committed offset of partition 0 went back from 4 to 3",
        "the group's final committed offset of partition 0 is 2; its commits left it at 4"]


def test_a_member_resumes_elsewhere_than_the_last_commit():
    seen = clean()
    seen.group += [GroupEvent("m2", "assigned", 0), group_read("m2", 0, 2, "c-1")]
    assert commits_survive(seen) == [
        "m2 resumed partition 0 at 2; the group's commits left it at 4"]
    seen = clean()  # above the last commit: records read but never committed are skipped
    seen.group += [GroupEvent("m2", "assigned", 0), group_read("m2", 0, 5, "c-2")]
    assert commits_survive(seen) == [
        "m2 resumed partition 0 at 5; the group's commits left it at 4"]


def test_before_any_commit_a_member_starts_at_the_beginning():
    seen = clean()
    seen.group = [GroupEvent("m1", "assigned", 1), group_read("m1", 1, 0, "c-9")]
    seen.final_committed = {0: 4}
    assert commits_survive(seen) == []
    seen.group = [GroupEvent("m1", "assigned", 1), group_read("m1", 1, 3, "c-9")]
    assert commits_survive(seen) == [
        "m1 resumed partition 1 at 3; the group's commits left it at 0"]


def test_a_failed_or_unanswered_commit_may_have_landed():
    seen = clean()  # m1 committed 4 (acknowledged)
    seen.group += commit("m1", 0, 6, "m1#2", acked=False)
    seen.group += [GroupEvent("m2", "assigned", 0), group_read("m2", 0, 6, "c-3")]
    assert commits_survive(seen) == []  # the failed commit landed
    seen.group += [GroupEvent("m2", "revoked", 0), GroupEvent("m3", "assigned", 0),
                   group_read("m3", 0, 4, "c-2")]
    assert commits_survive(seen) == []  # or it did not
    # still in flight when another member was assigned the partition: either
    seen = clean()
    seen.group += [GroupEvent("m1", "committing", 0, 7, "m1#2"),
                   GroupEvent("m2", "assigned", 0), group_read("m2", 0, 7, "c-3")]
    assert commits_survive(seen) == []


def test_an_acknowledged_commit_that_began_later_wins():
    seen = clean()
    seen.group += commit("m1", 0, 6, "m1#2", acked=False) + commit("m1", 0, 8, "m1#3")
    seen.group += [GroupEvent("m2", "assigned", 0), group_read("m2", 0, 6, "c-3")]
    seen.final_committed = {0: 8}
    assert commits_survive(seen) == [
        "m2 resumed partition 0 at 6; the group's commits left it at 8"]
    # two attempts in flight together: either may have landed last
    seen = clean()
    seen.group += [GroupEvent("m1", "committing", 0, 6, "m1#2"),
                   GroupEvent("m2", "committing", 0, 5, "m2#1")]
    seen.group += [GroupEvent("m2", "committed", 0, 5, "m2#1"),
                   GroupEvent("m1", "committed", 0, 6, "m1#2")]
    seen.final_committed = {0: 5}
    assert commits_survive(seen) == []


def test_the_resumer_starts_where_the_group_left_off():
    seen = clean()
    seen.group += [GroupEvent("resumer", "assigned", 0), group_read("resumer", 0, 4, "c-2")]
    assert commits_survive(seen) == []
    seen.final_committed = {0: 5}
    assert commits_survive(seen) == [
        "the group's final committed offset of partition 0 is 5; its commits left it at 4",
        "the resumer started partition 0 at 4, the group had committed 5"]
