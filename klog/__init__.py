"""klog: a Kafka-compatible log broker, and this package, its Python client library.

Example::

    import klog

    with klog.Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        producer.send("clicks", b"hello", key=b"user-1").result(timeout=10)

    consumer = klog.Consumer(bootstrap_servers="127.0.0.1:9092", group_id="loaders",
                             auto_offset_reset="earliest")
    consumer.subscribe(["clicks"])     # or consumer.assign([klog.TopicPartition("clicks", 0)])
    for record in consumer:
        print(record.topic, record.partition, record.offset, record.value)

The asyncio flavour, with the same API over the same protocol state, is `klog.aio`.

The clients log through the standard `logging` module under the ``klog`` logger
(connections, metadata changes, rebalances, retries, failed commits). As a library it only
adds a NullHandler: nothing is printed unless the application configures logging, e.g.
``logging.basicConfig(level=logging.INFO)`` or ``logging.getLogger("klog").setLevel(...)``.
"""

import logging as _logging

from klog.admin import Admin, PartitionInfo, TopicDescription
from klog.consumer import Consumer
from klog.errors import (
    BrokerUnavailableError,
    ClosedError,
    CommitFailedError,
    ErrorCode,
    KafkaError,
    KafkaTimeoutError,
    KlogError,
    MessageSizeTooLargeError,
    NoOffsetForPartitionError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    TransactionAbortableError,
    TransactionError,
    TransactionFatalError,
    TransactionStateError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from klog.producer import FutureRecordMetadata, FutureRecordMetadataList, Producer
from klog.protocol.records_columns import RecordColumns
from klog.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

_logging.getLogger("klog").addHandler(_logging.NullHandler())

__all__ = [
    "Admin",
    "BrokerUnavailableError",
    "ClosedError",
    "CommitFailedError",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "ErrorCode",
    "FutureRecordMetadata",
    "FutureRecordMetadataList",
    "KafkaError",
    "KafkaTimeoutError",
    "KlogError",
    "MessageSizeTooLargeError",
    "NoOffsetForPartitionError",
    "NotLeaderOrFollowerError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceNumberError",
    "PartitionInfo",
    "Producer",
    "ProducerFencedError",
    "RecordColumns",
    "RecordMetadata",
    "RequestTimedOutError",
    "TopicAlreadyExistsError",
    "TopicDescription",
    "TopicPartition",
    "TransactionAbortableError",
    "TransactionError",
    "TransactionFatalError",
    "TransactionStateError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
]
