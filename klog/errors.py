"""The client's exceptions: one hierarchy over Kafka's error codes, retriable or not.

Messages name the topic, partition and broker where those are known, so a failure in a log
says whose it was.
"""

from __future__ import annotations

from klog.protocol.errors import ErrorCode


class KlogError(Exception):
    """Base of every error the client raises."""

    retriable = False


class BrokerUnavailableError(KlogError):
    """No connection could be made to a broker, or it closed the connection."""

    retriable = True


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


def raise_for(code: int, message: str | None = None, **where) -> None:
    """Raise `KafkaError` unless `code` is NONE."""
    if code != ErrorCode.NONE:
        raise KafkaError(code, message, **where)
