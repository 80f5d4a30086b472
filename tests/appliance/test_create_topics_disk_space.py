"""CreateTopics on a disk too small for the new logs' preallocation (issue 26): Kafka's
KAFKA_STORAGE_ERROR naming the log dir, and nothing created, where it answered
UNKNOWN_SERVER_ERROR with a traceback and left the topic decided without its logs.

A real disk is not filled: the topic asks for 1 GiB segments on more partitions than this
disk holds (each preallocates its first segment). One appliance, about 3 s."""

from __future__ import annotations

import shutil

from confluent_kafka.admin import AdminClient

from klog.admin import Admin
from klog.errors import KafkaError

GIB = 1 << 30


def test_a_topic_the_disk_cannot_hold_is_refused_with_storage_error(appliance):
    disk = appliance.log_dirs[0]
    partitions = shutil.disk_usage(disk).free // GIB + 2  # one more than fits
    with Admin(appliance.bootstrap) as admin:
        try:
            admin.create_topic("too-big", partitions, configs={"segment.bytes": str(GIB)})
            raise AssertionError("created a topic the disk cannot hold")
        except KafkaError as exc:
            assert exc.code.name == "KAFKA_STORAGE_ERROR", exc
            assert str(disk) in str(exc) and "disk space" in str(exc), exc
        admin.create_topic("fits", 2)  # the refusal left the appliance as it was
    topics = AdminClient({"bootstrap.servers": appliance.bootstrap}).list_topics(
        timeout=10).topics
    assert "too-big" not in topics and len(topics["fits"].partitions) == 2
    assert not list(disk.glob("too-big-*"))
    assert "Traceback" not in appliance.log_text()
    assert "CreateTopics refused: not enough disk space" in appliance.log_text()
