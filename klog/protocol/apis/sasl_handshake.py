"""SaslHandshake (key 17): the client names the SASL mechanism it wants on this connection.

v1 says the tokens then travel inside SaslAuthenticate requests (KIP-152); v0 meant raw,
unframed tokens, which klog does not read (no client it targets sends v0: see
:mod:`appliance.workers.authentication`). The answer lists the mechanisms the listener enables.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, STRING, Array
from klog.protocol.schema import Field, Message

KEY = 17


class SaslHandshakeRequest(Message, versions="0-1"):
    mechanism = Field(STRING)


class SaslHandshakeResponse(Message, versions="0-1"):
    error_code = Field(INT16)
    mechanisms = Field(Array(STRING))


Request, Response = SaslHandshakeRequest, SaslHandshakeResponse


def error_response(request: object, version: int, code: int) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=code, mechanisms=[])
