"""SaslAuthenticate (key 36): one SASL token each way, framed as a Kafka request (KIP-152).

v1 adds ``session_lifetime_ms`` (KIP-368 re-authentication; klog answers 0: no expiry, so no
client re-authenticates); v2 is the flexible encoding, which only kafka-python sends.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BYTES, INT16, INT64, STRING
from klog.protocol.schema import Field, Message

KEY = 36


class SaslAuthenticateRequest(Message, versions="0-2", flexible="2+"):
    auth_bytes = Field(BYTES)


class SaslAuthenticateResponse(Message, versions="0-2", flexible="2+"):
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+")
    auth_bytes = Field(BYTES)
    session_lifetime_ms = Field(INT64, "1+")


Request, Response = SaslAuthenticateRequest, SaslAuthenticateResponse


def error_response(request: object, version: int, code: int) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=code, error_message=None, auth_bytes=b"")
