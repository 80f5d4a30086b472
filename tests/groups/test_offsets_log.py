"""__consumer_offsets on disk: commits are durable, snapshots keep the log (and the load at
start-up) small, and bad input is refused without harm. Raw protocol against a real
appliance."""

from __future__ import annotations

import re

from klog.protocol.apis import (
    create_partitions,
    delete_topics,
    find_coordinator,
    offset_commit,
    offset_fetch,
    produce,
)
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch
from tests.interop.helpers import create_topic
from tests.worker.raw import RawClient

SMALL_SEGMENTS = {"offsets.topic.segment.bytes": str(64 * 1024),
                  "offsets.topic.num.partitions": "1"}


def commit(client, group, topic, offsets: dict[int, int], generation=-1, member=""):
    answer = client.call(offset_commit, 7, group_id=group,
                         generation_id_or_member_epoch=generation, member_id=member,
                         group_instance_id=None, topics=[
                             offset_commit.OffsetCommitRequestTopic(name=topic, partitions=[
                                 offset_commit.OffsetCommitRequestPartition(
                                     partition_index=p, committed_offset=o,
                                     committed_leader_epoch=-1, committed_metadata="m")
                                 for p, o in offsets.items()])])
    return {p.partition_index: ErrorCode(p.error_code)
            for t in answer.topics for p in t.partitions}


def fetch(client, group):
    answer = client.call(offset_fetch, 5, group_id=group, topics=None)
    assert answer.error_code == 0
    return {(t.name, p.partition_index): p.committed_offset
            for t in answer.topics for p in t.partitions}


def test_snapshots_bound_the_log_and_a_restart_reloads_the_latest_offsets(appliance_factory):
    appliance = appliance_factory(settings=SMALL_SEGMENTS)
    create_topic(appliance.bootstrap, "t", 4)
    client = RawClient(appliance.port)
    groups = [f"g{i}" for i in range(5)]
    for group in groups:  # as a client does first; creates the internal topic
        assert client.call(find_coordinator, 2, key=group, key_type=0).error_code == 0
    for round_ in range(1500):
        group = groups[round_ % len(groups)]
        assert set(commit(client, group, "t", {p: round_ for p in range(4)}).values()) == \
            {ErrorCode.NONE}
    expected = {g: fetch(client, g) for g in groups}
    assert expected["g4"] == {("t", p): 1499 for p in range(4)}
    client.close()
    partition_dir = appliance.log_dirs[0] / "__consumer_offsets-0"
    segments = sorted(partition_dir.glob("*.log"))
    written = 1500 * 4 * 60  # bytes of commits, at least
    assert sum(s.stat().st_size for s in segments) < written / 2, segments
    assert len(segments) <= 3
    assert appliance.stop() == 0
    appliance.start()
    client = RawClient(appliance.port)
    assert {g: fetch(client, g) for g in groups} == expected
    client.close()
    loaded = re.findall(r"loaded __consumer_offsets-0: (\d+) group\(s\) from (\d+) record",
                        appliance.log_text())
    groups_loaded, records = map(int, loaded[-1])
    assert groups_loaded == 5 and records < 1500 * 4 / 2  # a snapshot, not the history


def test_clients_cannot_write_grow_or_delete_the_internal_topic(appliance):
    client = RawClient(appliance.port)
    client.call(find_coordinator, 2, key="someone", key_type=0)  # creates it
    batch = build_batch([(0, b"k", b"v", [])])
    answer = client.call(produce, 8, transactional_id=None, acks=1, timeout_ms=1000,
                         topic_data=[produce.TopicProduceData(
                             name="__consumer_offsets", partition_data=[
                                 produce.PartitionProduceData(index=0, records=batch)])])
    error = answer.responses[0].partition_responses[0].error_code
    assert error == ErrorCode.INVALID_TOPIC_EXCEPTION
    answer = client.call(delete_topics, 3, topic_names=["__consumer_offsets"], timeout_ms=1000)
    assert answer.responses[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    answer = client.call(create_partitions, 1, timeout_ms=1000, validate_only=False, topics=[
        create_partitions.CreatePartitionsTopic(name="__consumer_offsets", count=64,
                                                assignments=None)])
    assert answer.results[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "partition count" in answer.results[0].error_message
    client.close()


def test_commit_checks(appliance):
    create_topic(appliance.bootstrap, "t", 2)
    client = RawClient(appliance.port)
    assert client.call(find_coordinator, 2, key="g", key_type=0).error_code == 0
    assert commit(client, "g", "t", {0: 5, 7: 1}) == {0: ErrorCode.NONE,
                                                       7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert commit(client, "g", "missing", {0: 1}) == {0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert commit(client, "g", "t", {1: 5}, generation=3, member="ghost") == \
        {1: ErrorCode.UNKNOWN_MEMBER_ID}
    answer = client.call(offset_commit, 7, group_id="g", generation_id_or_member_epoch=-1,
                         member_id="", group_instance_id=None, topics=[
                             offset_commit.OffsetCommitRequestTopic(name="t", partitions=[
                                 offset_commit.OffsetCommitRequestPartition(
                                     partition_index=1, committed_offset=1,
                                     committed_leader_epoch=-1,
                                     committed_metadata="x" * 5000)])])
    assert answer.topics[0].partitions[0].error_code == ErrorCode.OFFSET_METADATA_TOO_LARGE
    assert fetch(client, "g") == {("t", 0): 5}
    empty = client.call(offset_fetch, 1, group_id="", topics=[])
    assert empty.topics == []
    client.close()
