"""The client's exceptions: one hierarchy over Kafka's error codes, retriable or not.

``KlogError`` is the root. ``KafkaError`` is a broker's answer (``.code``, an ``ErrorCode``;
``.retriable`` from Kafka's own classification); the codes a program commonly catches have
their own subclass (``OffsetOutOfRangeError``, ``NotLeaderOrFollowerError``, ...) and
:func:`error_for` picks the most specific class for a code. The other errors are the client's
own: a broker that cannot be reached, a wait that timed out, a closed client, a partition
with no offset to start from. Messages name the topic, partition and broker where those are
known, so a failure in a log says whose it was.
"""

from __future__ import annotations

from klog.protocol.error_codes import ErrorCode

__all__ = [
    "BrokerUnavailableError",
    "ClosedError",
    "CommitFailedError",
    "ErrorCode",
    "KafkaError",
    "KafkaTimeoutError",
    "KlogError",
    "LogTruncationError",
    "MessageSizeTooLargeError",
    "NoOffsetForPartitionError",
    "NotLeaderOrFollowerError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceNumberError",
    "ProducerFencedError",
    "RequestTimedOutError",
    "TopicAlreadyExistsError",
    "TransactionAbortableError",
    "TransactionError",
    "TransactionFatalError",
    "TransactionStateError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "WouldBlockError",
    "error_for",
    "raise_for",
]


class KlogError(Exception):
    """Base of every error the client raises."""

    retriable = False


class BrokerUnavailableError(KlogError):
    """No connection could be made to a broker, or it closed the connection. Retriable: the
    producer retries it by itself, and a consumer reconnects on its next poll."""

    retriable = True


class KafkaTimeoutError(KlogError, TimeoutError):
    """A wait ran out: ``max_block_ms`` in send (no metadata, or the buffer stayed full),
    ``delivery_timeout_ms`` for a record, or the timeout given to ``result``/``flush``."""


class WouldBlockError(KlogError):
    """A ``*_nowait`` call could not complete without waiting (trio's WouldBlock)."""


class ClosedError(KlogError):
    """The producer or consumer was closed (by this program: the caller's fault)."""


class CommitFailedError(KlogError):
    """An offset commit was refused for good: the consumer is not (or no longer) a member of
    the group's current generation (a rebalance happened: poll, then commit again), or the
    coordinator gave a non-retriable error. ``code`` is the broker's ErrorCode, if it gave
    one."""

    def __init__(self, message: str, code: ErrorCode | None = None):
        super().__init__(message)
        self.code = code


class NoOffsetForPartitionError(KlogError):
    """A partition has no valid position and ``auto_offset_reset="none"`` forbids choosing one."""


class LogTruncationError(KlogError):
    """The leader's log was truncated below this consumer's fetch position (records it read
    are gone: an unclean leader election), and ``auto_offset_reset="none"`` forbids moving
    on. ``divergent_offset``: where the logs part (-1: unknown); seek there, or elsewhere."""

    def __init__(self, message: str, *, topic: str, partition: int, divergent_offset: int):
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.divergent_offset = divergent_offset


class TransactionError(KlogError):
    """A transactional producer's transaction cannot go on as it is; the subclass says what
    to do (Kafka's three classes of transaction errors)."""


class TransactionAbortableError(TransactionError):
    """The transaction cannot commit, but the producer is fine: call ``abort_transaction()``,
    then begin a new transaction and redo its work. ``cause`` is what broke it (a batch
    refused for good, a TxnOffsetCommit from an old generation, an authorization refusal)."""

    def __init__(self, message: str, cause: BaseException | None = None):
        super().__init__(message)
        self.cause = cause


class TransactionFatalError(TransactionError):
    """The producer can do nothing more: ``close()`` it (and make a new one if this process
    should still produce). ``cause`` is the broker's error, when one said so."""

    def __init__(self, message: str, cause: BaseException | None = None):
        super().__init__(message)
        self.cause = cause


class TransactionStateError(TransactionError):
    """A call out of order (the caller's fault): send() or commit before
    ``begin_transaction()``, a transaction method before ``init_transactions()``, or on a
    producer without a ``transactional_id``."""


class KafkaError(KlogError):
    """A broker answered with a Kafka error code."""

    def __init__(self, code: ErrorCode | int, message: str | None = None, *,
                 topic: str | None = None, partition: int | None = None,
                 broker: str | None = None):
        self.code = ErrorCode(code)
        self.topic = topic
        self.partition = partition
        self.broker = broker
        where = ""
        if topic is not None:
            where = f" for {topic}" + (f"[{partition}]" if partition is not None else "")
        if broker is not None:
            where += f" from {broker}"
        text = f"{self.code.name}{where}"
        if message:
            text += f": {message}"
        super().__init__(text)

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        return self.code.retriable


class OffsetOutOfRangeError(KafkaError):
    """The fetch position is outside [log start, high watermark]."""


class UnknownTopicOrPartitionError(KafkaError):
    """The topic or partition does not exist (retriable: it may be being created)."""


class NotLeaderOrFollowerError(KafkaError):
    """The broker does not hold the partition (any more): metadata is stale."""


class MessageSizeTooLargeError(KafkaError):
    """A record or batch is larger than the producer's ``max_request_size`` or the broker's
    ``max.message.bytes``."""


class TopicAlreadyExistsError(KafkaError):
    """CreateTopics for a name that exists."""


class OutOfOrderSequenceNumberError(KafkaError):
    """The broker saw a gap in an idempotent producer's sequence numbers."""


class ProducerFencedError(KafkaError, TransactionFatalError):
    """Another producer with the same ``transactional_id`` (a newer epoch) took over, or this
    one may not use its transactional id (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED): fatal, close the producer. Nothing it writes
    from now on will ever be visible to read_committed consumers."""

    def __init__(self, code: ErrorCode | int, message: str | None = None, **where):
        KafkaError.__init__(self, code, message, **where)
        self.cause = None


class RequestTimedOutError(KafkaError):
    """The broker could not complete the request within its timeout."""


class UnsupportedVersionError(KafkaError):
    """The broker does not serve a version of an API we need."""


_BY_CODE: dict[ErrorCode, type[KafkaError]] = {
    ErrorCode.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: UnknownTopicOrPartitionError,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: NotLeaderOrFollowerError,
    ErrorCode.MESSAGE_TOO_LARGE: MessageSizeTooLargeError,
    ErrorCode.RECORD_LIST_TOO_LARGE: MessageSizeTooLargeError,
    ErrorCode.TOPIC_ALREADY_EXISTS: TopicAlreadyExistsError,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: OutOfOrderSequenceNumberError,
    ErrorCode.REQUEST_TIMED_OUT: RequestTimedOutError,
    ErrorCode.UNSUPPORTED_VERSION: UnsupportedVersionError,
    ErrorCode.PRODUCER_FENCED: ProducerFencedError,
    ErrorCode.INVALID_PRODUCER_EPOCH: ProducerFencedError,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ProducerFencedError,
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: ProducerFencedError,
}


def error_for(code: ErrorCode | int, message: str | None = None, **where) -> KafkaError:
    """The most specific KafkaError for ``code``, naming ``topic``/``partition``/``broker``."""
    code = ErrorCode(code)
    return _BY_CODE.get(code, KafkaError)(code, message, **where)


def raise_for(code: int, message: str | None = None, **where) -> None:
    """Raise :func:`error_for` ``(code, ...)`` unless ``code`` is NONE."""
    if code != ErrorCode.NONE:
        raise error_for(code, message, **where)
