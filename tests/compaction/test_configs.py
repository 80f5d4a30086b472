"""Compacted topics' configs: the topic keys Kafka has for the cleaner, Kafka's refusals
(INVALID_CONFIG before anything is decided), the broker's `log.cleaner.*` keys, retention
left to the cleaner under `cleanup.policy=compact`, and a compacted topic's refusal of a
record without a key (INVALID_RECORD, per batch, nothing written)."""

from __future__ import annotations

import pytest

from appliance.config import build_config
from appliance.config_error import ConfigError
from appliance.control.topics import check_new_topic, topic_log_config
from appliance.segments import LogConfig, PartitionLog
from appliance.workers.replication.context import ReplicaContext
from appliance.workers.replication.partition import Partition
from appliance.workers.replication.waiters import AppendWaiters
from klog.protocol.error_codes import ErrorCode
from klog.protocol.record_keys import keyless_batch_index
from klog.protocol.records import build_batch
from tests.replication.test_partition import Control, Publications

DEFAULTS = LogConfig()


@pytest.mark.parametrize("value, policy", [
    ("compact", "compact"), ("delete", "delete"), ("compact,delete", "compact,delete"),
    ("delete, compact", "delete,compact"), ("COMPACT", "compact")])
def test_cleanup_policy_values_kafka_accepts(value, policy):
    config = topic_log_config(DEFAULTS, {"cleanup.policy": value})
    assert config.cleanup_policy == policy
    assert config.compact == ("compact" in policy)
    assert config.delete == ("delete" in policy)
    assert config.to_kafka()["cleanup.policy"] == policy


@pytest.mark.parametrize("configs", [
    {"cleanup.policy": "shrink"}, {"cleanup.policy": ""}, {"cleanup.policy": "compact,x"},
    {"min.cleanable.dirty.ratio": "1.5"}, {"min.cleanable.dirty.ratio": "-0.1"},
    {"min.cleanable.dirty.ratio": "half"}, {"min.compaction.lag.ms": "-1"},
    {"max.compaction.lag.ms": "0"}, {"delete.retention.ms": "-5"}, {"segment.ms": "0"}])
def test_values_kafka_refuses_are_invalid_config(configs):
    refused = check_new_topic("t", 1, configs, DEFAULTS)
    assert refused is not None and refused.error == ErrorCode.INVALID_CONFIG
    assert next(iter(configs)) in refused.message


def test_cleaner_topic_configs_round_trip_for_describe_configs():
    given = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
             "min.compaction.lag.ms": "100", "max.compaction.lag.ms": "60000",
             "delete.retention.ms": "1000", "segment.ms": "5000"}
    assert check_new_topic("t", 1, given, DEFAULTS) is None
    described = topic_log_config(DEFAULTS, given).to_kafka()
    assert {k: described[k] for k in given} == given
    assert DEFAULTS.to_kafka()["delete.retention.ms"] == "86400000"  # Kafka's defaults
    assert DEFAULTS.to_kafka()["min.cleanable.dirty.ratio"] == "0.5"


def test_broker_keys_of_the_cleaner():
    config = build_config({
        "log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": "0.2",
        "log.cleaner.delete.retention.ms": "5", "log.cleaner.min.compaction.lag.ms": "7",
        "log.cleaner.max.compaction.lag.ms": "9", "log.cleaner.enable": "false",
        "log.cleaner.threads": "2", "log.cleaner.backoff.ms": "50",
        "log.cleaner.dedupe.buffer.size": "1048576",
        "log.cleaner.io.max.bytes.per.second": "1e6", "log.cleaner.io.buffer.size": "65536"})
    defaults = config.log_defaults
    assert (defaults.cleanup_policy, defaults.min_cleanable_dirty_ratio,
            defaults.delete_retention_ms, defaults.min_compaction_lag_ms,
            defaults.max_compaction_lag_ms) == ("compact", 0.2, 5, 7, 9)
    assert (config.log_cleaner_enable, config.log_cleaner_threads, config.log_cleaner_backoff_ms,
            config.log_cleaner_dedupe_buffer_size, config.log_cleaner_io_max_bytes_per_second,
            config.log_cleaner_io_buffer_size) == (False, 2, 50, 1 << 20, 1e6, 65536)
    assert "log.cleaner.enable" not in config.ignored_keys
    with pytest.raises(ConfigError, match="log.cleanup.policy"):
        build_config({"log.cleanup.policy": "forget"})
    with pytest.raises(ConfigError, match="log.cleaner.min.cleanable.ratio"):
        build_config({"log.cleaner.min.cleanable.ratio": "2"})


def _keyed(*keys, base_offset=0):
    return build_batch([(1_000 + i, k, None if k == b"dead" else b"v", ())
                        for i, k in enumerate(keys)], base_offset=base_offset)


def test_keyless_batch_index_finds_the_first_batch_with_a_null_key():
    assert keyless_batch_index(_keyed(b"a", b"b") + _keyed(b"c")) is None
    assert keyless_batch_index(_keyed(b"a") + _keyed(b"b", None)) == 1
    assert keyless_batch_index(_keyed(b"dead")) is None  # a tombstone has a key


def test_compaction_alone_leaves_old_segments_to_the_cleaner(tmp_path):
    config = LogConfig(segment_bytes=200, retention_ms=1, cleanup_policy="compact")
    plog = PartitionLog.open(str(tmp_path / "t-0"), config, now_ms=0)
    try:
        for n in range(5):
            plog.append(_keyed(b"k%d" % n), now_ms=0)
        assert plog.apply_retention(now_ms=10**12) == 0
        assert plog.log_start_offset == 0
    finally:
        plog.close()


def test_a_compacted_topic_refuses_a_record_without_a_key(tmp_path):
    context = ReplicaContext(node_id=100, worker_index=0, log_dir=tmp_path, control=Control(),
                             publisher=Publications(), waiters=AppendWaiters(), committer=None)
    plog = PartitionLog.open(str(tmp_path / "t-0"),
                             LogConfig(cleanup_policy="compact"), now_ms=0)
    partition = Partition("t", 0, plog, context, ask_isr=lambda p, isr: None)
    try:
        refused = partition.append_as_leader(_keyed(b"a") + _keyed(None), now_ms=0)
        assert refused.error == ErrorCode.INVALID_RECORD
        assert "without key" in refused.message and plog.log_end_offset == 0
        assert partition.append_as_leader(_keyed(b"a", b"dead"), now_ms=0).error == \
            ErrorCode.NONE
    finally:
        partition.close()
