"""The exceptions the codec raises, and whose fault each one is.

Everything the codec raises on bad input or bad use derives from :class:`ProtocolError`, so a
caller that drives a connection needs one ``except`` clause. The subclasses say who is to blame:

- :class:`FramingError`: the peer sent a frame we cannot even delimit or address (a negative or
  oversized size prefix, a header too short to hold a correlation id). Nothing can be answered;
  the caller closes the connection.
- :class:`DecodeError`: the bytes inside a well-delimited frame do not match the schema
  (truncated, trailing bytes, bad lengths). On the server side this becomes an error code in the
  :class:`~klog.protocol.server.Request`; on the client side it is raised.
- :class:`EncodeError`: *our* caller handed the encoder a value the schema cannot carry
  (``None`` for a non-nullable field, an int out of range, a version we do not declare).
- :class:`CorrelationError`: a response arrived that the client did not ask for.

Kafka's numeric error codes, which travel inside messages, are in :mod:`klog.protocol.error_codes`.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class: the bytes or the values do not follow the Kafka wire protocol."""


class FramingError(ProtocolError):
    """The frame cannot be delimited or addressed; the only remedy is to close the connection."""


class DecodeError(ProtocolError):
    """A frame's content does not match its schema (the peer's fault)."""


class EncodeError(ProtocolError):
    """A value cannot be encoded with the requested schema and version (the caller's fault)."""


class CorrelationError(ProtocolError):
    """A response's correlation id does not match the oldest request in flight."""
