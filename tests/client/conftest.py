"""One appliance per test module (topics are unique per test), and small helpers."""

from __future__ import annotations

import pytest

import klog
from tests.conftest import running_appliance, topic_maker


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("client-appliance")) as appliance:
        yield appliance


@pytest.fixture(scope="module")
def topic_factory(broker):
    """``make(partitions=1, **configs) -> name``: a fresh topic on the module's appliance."""
    return topic_maker(broker.bootstrap)


def read_all(bootstrap: str, topic: str, count: int, *, partitions=None, timeout_s=30.0,
             **options) -> list[klog.ConsumerRecord]:
    """``count`` records of ``topic`` from the beginning, with klog.Consumer."""
    with klog.Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                       consumer_timeout_ms=int(timeout_s * 1000), **options) as consumer:
        if partitions is None:
            partitions = consumer.partitions_for_topic(topic)
        consumer.assign([klog.TopicPartition(topic, p) for p in partitions])
        records = []
        for record in consumer:
            records.append(record)
            if len(records) >= count:
                break
        return records
