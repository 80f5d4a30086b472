"""SaslAuthenticate outside authentication: ILLEGAL_SASL_STATE, as Kafka answers on a
PLAINTEXT listener or after authentication (see handlers/sasl_handshake.py)."""

from __future__ import annotations

from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import sasl_authenticate
from klog.protocol.error_codes import ErrorCode

API_KEY = sasl_authenticate.KEY


def handle(worker: HandlerContext, request):
    return sasl_authenticate.Response(
        error_code=ErrorCode.ILLEGAL_SASL_STATE, auth_bytes=b"",
        error_message="SaslAuthenticate not expected on this connection now")
