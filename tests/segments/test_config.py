"""LogConfig: defaults, validation naming Kafka's dotted keys, the Kafka string map both ways."""

from __future__ import annotations

import dataclasses

import pytest

from appliance.segments import LogConfig


def test_defaults_are_kafkas():
    config = LogConfig()
    assert config.segment_bytes == 1 << 30
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.index_interval_bytes == 4096
    assert config.segment_index_bytes == 10 << 20
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.flush_messages == 2**63 - 1
    assert config.message_timestamp_type == "CreateTime"
    assert config.max_message_bytes == 1048588
    assert config.file_delete_delay_ms == 60000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"segment_bytes": 13}, "segment.bytes must be >= 14"),
        ({"segment_bytes": 2**31}, "segment.bytes must be <= 2147483647"),
        ({"retention_ms": -2}, "retention.ms must be >= -1"),
        ({"flush_messages": 0}, "flush.messages must be >= 1"),
        ({"segment_index_bytes": 11}, "segment.index.bytes must be >= 12"),
        ({"message_timestamp_type": "Wallclock"}, "message.timestamp.type must be one of"),
        ({"segment_ms": "1"}, "segment.ms must be an integer"),
    ],
)
def test_bad_values_name_the_kafka_key(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LogConfig(**kwargs)


def test_keyword_only_and_frozen():
    with pytest.raises(TypeError):
        LogConfig(1024)  # type: ignore[misc]
    config = LogConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.segment_bytes = 1  # type: ignore[misc]


def test_from_kafka_and_back():
    config = LogConfig.from_kafka(
        {"segment.bytes": "1048576", "retention.ms": "-1",
         "message.timestamp.type": "LogAppendTime"}
    )
    assert config.segment_bytes == 1048576 and config.retention_ms == -1
    assert config.log_append_time
    assert LogConfig.from_kafka(config.to_kafka()) == config
    assert config.to_kafka()["file.delete.delay.ms"] == "60000"
    # a boolean topic config, in Kafka's spelling both ways
    assert config.to_kafka()["unclean.leader.election.enable"] == "false"
    unclean = LogConfig.from_kafka({"unclean.leader.election.enable": "True"})
    assert unclean.unclean_leader_election_enable is True
    assert LogConfig.from_kafka(unclean.to_kafka()) == unclean


def test_from_kafka_names_unknown_and_bad_keys():
    with pytest.raises(ValueError, match="unknown log config 'segment.size'"):
        LogConfig.from_kafka({"segment.size": "1"})
    with pytest.raises(ValueError, match="retention.bytes must be an integer, got 'lots'"):
        LogConfig.from_kafka({"retention.bytes": "lots"})
    with pytest.raises(ValueError, match="unclean.leader.election.enable must be true or false"):
        LogConfig.from_kafka({"unclean.leader.election.enable": "1"})
