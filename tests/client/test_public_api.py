"""The client's public surface: names pinned, options validated, docstrings present."""

from __future__ import annotations

import inspect

import pytest

import klog
import klog.aio
from klog.config import ConsumerConfig, ProducerConfig

PUBLIC = [
    "Admin", "BrokerUnavailableError", "ClosedError", "CommitFailedError", "Consumer",
    "ConsumerGroupMetadata", "ConsumerRecord", "ErrorCode",
    "FutureRecordMetadata", "FutureRecordMetadataList", "KafkaError", "KafkaTimeoutError",
    "KlogError", "MessageSizeTooLargeError", "NoOffsetForPartitionError",
    "NotLeaderOrFollowerError", "OffsetAndMetadata", "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceNumberError", "PartitionInfo", "Producer", "ProducerFencedError",
    "RecordColumns",
    "RecordMetadata",
    "RequestTimedOutError", "TopicAlreadyExistsError", "TopicDescription", "TopicPartition",
    "TransactionAbortableError", "TransactionError", "TransactionFatalError",
    "TransactionStateError", "UnknownTopicOrPartitionError", "UnsupportedVersionError",
]
AIO_PUBLIC = ["AIOConsumer", "AIOFutureRecordMetadata", "AIOFutureRecordMetadataList",
              "AIOProducer"]
SAME_METHODS = {
    "Producer": ["send", "send_batch", "flush", "close", "init_transactions",
                 "begin_transaction", "send_offsets_to_transaction", "commit_transaction",
                 "abort_transaction"],
    "Consumer": ["assign", "assignment", "seek", "seek_to_beginning", "seek_to_end", "position",
                 "offsets_for_times", "beginning_offsets", "end_offsets", "poll", "close",
                 "partitions_for_topic", "pause", "resume", "paused", "highwater",
                 "subscribe", "subscription", "unsubscribe", "commit", "commit_async",
                 "committed", "group_metadata"],
}


def test_public_names_are_pinned():
    assert sorted(klog.__all__) == sorted(PUBLIC)
    assert sorted(klog.aio.__all__) == sorted(AIO_PUBLIC)
    for name in klog.__all__:
        assert getattr(klog, name) is not None
    for name in klog.aio.__all__:
        assert getattr(klog.aio, name) is not None


def test_the_asyncio_flavour_has_the_same_methods():
    for name, methods in SAME_METHODS.items():
        blocking, aio = getattr(klog, name), getattr(klog.aio, "AIO" + name)
        for method in methods:
            assert hasattr(blocking, method) and hasattr(aio, method), (name, method)
            ours = inspect.signature(getattr(blocking, method)).parameters
            theirs = inspect.signature(getattr(aio, method)).parameters
            assert list(ours) == list(theirs), (name, method)


def test_public_classes_have_docstrings_with_examples_where_it_matters():
    for name in klog.__all__ + ["aio"]:
        assert inspect.getdoc(getattr(klog, name)), name
    for module in (klog, klog.aio, klog.Producer, klog.Consumer):
        doc = inspect.getdoc(inspect.getmodule(module) if module not in (klog, klog.aio)
                             else module)
        assert "Example" in doc, module


def test_names_follow_kafka_python():
    record = klog.RecordMetadata("t", 1, 5, 123)
    assert (record.topic, record.partition, record.offset, record.timestamp) == ("t", 1, 5, 123)
    assert record.topic_partition == klog.TopicPartition("t", 1)
    from klog.types import make_consumer_record

    consumed = make_consumer_record("t", 2, 9, 100, b"k", b"v", [("h", b"x")])
    assert isinstance(consumed, klog.ConsumerRecord)
    assert (consumed.topic, consumed.partition, consumed.offset, consumed.timestamp,
            consumed.timestamp_type, consumed.key, consumed.value, consumed.headers) == (
        "t", 2, 9, 100, 0, b"k", b"v", [("h", b"x")])
    import pickle

    assert pickle.loads(pickle.dumps(consumed)).topic == "t"


@pytest.mark.parametrize("cls", [klog.Producer, klog.Consumer, klog.aio.AIOProducer,
                                 klog.aio.AIOConsumer])
def test_unknown_option_is_a_type_error_naming_it(cls):
    with pytest.raises(TypeError, match="'lingr_ms'") as info:
        cls(bootstrap_servers="127.0.0.1:9092", lingr_ms=5)
    if cls in (klog.Producer, klog.aio.AIOProducer):
        assert "did you mean 'linger_ms'" in str(info.value)
    with pytest.raises(TypeError, match="bootstrap_servers"):
        cls()


@pytest.mark.parametrize("options, name", [
    ({"acks": 2}, "acks"),
    ({"acks": "most"}, "acks"),
    ({"compression_type": "brotli"}, "compression_type"),
    ({"linger_ms": -1}, "linger_ms"),
    ({"batch_size": "big"}, "batch_size"),
    ({"bootstrap_servers": "nohost"}, "bootstrap_servers"),
    ({"enable_idempotence": True, "acks": 1}, "acks"),
    ({"enable_idempotence": True, "max_in_flight_requests_per_connection": 6},
     "max_in_flight_requests_per_connection"),
    ({"value_serializer": 3}, "value_serializer"),
])
def test_bad_producer_value_is_a_value_error_naming_the_option(options, name):
    with pytest.raises(ValueError, match=name):
        klog.Producer(**{"bootstrap_servers": "127.0.0.1:9092", **options})


@pytest.mark.parametrize("options, name", [
    ({"auto_offset_reset": "smallest"}, "auto_offset_reset"),
    ({"isolation_level": "serializable"}, "isolation_level"),
    ({"fetch_max_wait_ms": -5}, "fetch_max_wait_ms"),
    ({"max_poll_records": 0}, "max_poll_records"),
    ({"group_id": 5}, "group_id"),
])
def test_bad_consumer_value_is_a_value_error_naming_the_option(options, name):
    with pytest.raises(ValueError, match=name):
        klog.Consumer(**{"bootstrap_servers": "127.0.0.1:9092", **options})


def test_config_normalizes_kafka_spellings():
    config = klog.config.build(ProducerConfig, "Producer", {
        "bootstrap_servers": ["a:1", "b:2"], "acks": "all", "compression_type": None})
    assert (config.bootstrap_servers, config.acks, config.codec) == ("a:1,b:2", -1, 0)
    assert config.enable_idempotence
    relaxed = klog.config.build(ProducerConfig, "Producer", {"bootstrap_servers": "a:1",
                                                              "acks": 1})
    assert not relaxed.enable_idempotence  # Java's rule: implicit idempotence yields
    consumer = klog.config.build(ConsumerConfig, "Consumer", {
        "bootstrap_servers": "a:1", "group_id": "g", "auto_offset_reset": "EARLIEST"})
    assert consumer.auto_offset_reset == "earliest" and consumer.group_id == "g"
    with pytest.raises(Exception, match="frozen|cannot assign"):
        consumer.group_id = "other"


def test_errors_form_one_hierarchy_and_name_where():
    error = klog.errors.error_for(klog.ErrorCode.NOT_LEADER_OR_FOLLOWER, topic="t",
                                  partition=3, broker="127.0.0.1:9093")
    assert isinstance(error, klog.NotLeaderOrFollowerError)
    assert isinstance(error, klog.KafkaError) and isinstance(error, klog.KlogError)
    assert error.retriable and "t[3]" in str(error) and "127.0.0.1:9093" in str(error)
    fatal = klog.errors.error_for(klog.ErrorCode.INVALID_RECORD, topic="t")
    assert type(fatal) is klog.KafkaError and not fatal.retriable
    assert issubclass(klog.KafkaTimeoutError, TimeoutError)
