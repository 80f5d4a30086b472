"""SaslHandshake outside authentication: on a PLAINTEXT listener, or after a SASL client has
authenticated (klog offers no re-authentication), Kafka answers ILLEGAL_SASL_STATE. On a SASL
listener before authentication the connection's authenticator answers instead
(appliance/workers/authentication.py)."""

from __future__ import annotations

from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import sasl_handshake
from klog.protocol.error_codes import ErrorCode

API_KEY = sasl_handshake.KEY


def handle(worker: HandlerContext, request):
    sasl = worker.config.sasl_for(request.listener or worker.config.first_listener.name)
    return sasl_handshake.Response(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                   mechanisms=list(sasl.enabled_mechanisms) if sasl else [])
