"""SASL on one connection of a SASL listener: what may be served before authentication.

The connection hands every request to :meth:`Authenticator.receive` until the client is
authenticated, and gets back what to do, as Kafka's SaslServerAuthenticator does it:

- ApiVersions: served as usual (``None``: dispatch it).
- SaslHandshake v1 naming an enabled mechanism: answered; SaslAuthenticate tokens follow.
  v0 (raw, unframed tokens next) is answered with the mechanisms, but no client klog targets
  sends v0 (librdkafka, kafka-python, aiokafka and KafkaJS all send v1), so the raw tokens
  are not read: whatever comes next closes the connection.
- An unsupported mechanism (UNSUPPORTED_SASL_MECHANISM with the enabled list) and a failed
  SaslAuthenticate (SASL_AUTHENTICATION_FAILED with the reason) are *failures*: answered after
  ``connection.failed.authentication.delay.ms`` (the connection does not block the loop to
  wait), then the connection closes; counted.
- A SASL request out of turn: ILLEGAL_SASL_STATE, then the connection closes.
- Anything else before authentication, or a request that does not decode: closed at once.

After success the connection's principal is ``User:<name>``; the authenticator then steps
aside (SASL requests after that are the handlers', which answer ILLEGAL_SASL_STATE, as Kafka
does without re-authentication: ``session_lifetime_ms`` is 0).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from appliance.sasl_config import SaslSettings
from appliance.scram_credentials import BroadcastCredentials, ScramCredentialFile
from klog.protocol.apis import api_versions, sasl_authenticate, sasl_handshake
from klog.protocol.error_codes import ErrorCode
from klog.protocol.sasl import PLAIN, SCRAM_MECHANISMS, SaslFailure
from klog.protocol.sasl.plain import PlainServer
from klog.protocol.sasl.scram import ScramServer

HANDSHAKE_KEY = sasl_handshake.KEY
AUTHENTICATE_KEY = sasl_authenticate.KEY
API_VERSIONS_KEY = api_versions.KEY


class Action(Enum):
    ANSWER = "answer"  # send body, keep going
    ANSWER_AND_CLOSE = "answer and close"  # send body, then close
    FAIL = "fail"  # a failed authentication: send body after the delay, then close
    CLOSE = "close"  # close without an answer
    DROP = "drop"  # the connection is already failing: ignore the request


@dataclass(frozen=True)
class Outcome:
    action: Action
    body: Any = None
    reason: str = ""


class _State(Enum):
    HANDSHAKE = 1
    AUTHENTICATE = 2
    RAW = 3  # after a v0 handshake: nothing more is read
    FAILED = 4
    DONE = 5


def new_nonce() -> str:
    """A SCRAM server nonce: 32 random bytes, base64url (no comma, printable)."""
    return secrets.token_urlsafe(32)


class Authenticator:
    """The SASL state of one connection (see the module docstring)."""

    def __init__(self, settings: SaslSettings,
                 scram: ScramCredentialFile | BroadcastCredentials, *,
                 nonce: Callable[[], str] = new_nonce) -> None:
        self._settings = settings
        self._scram = scram
        self._nonce = nonce
        self._state = _State.HANDSHAKE
        self._server: Any = None
        self.principal: str | None = None

    @property
    def authenticated(self) -> bool:
        return self._state is _State.DONE

    def receive(self, request) -> Outcome | None:
        """What to do with ``request`` before authentication; None: dispatch it as usual."""
        key = request.header.api_key
        if self._state is _State.FAILED:
            return Outcome(Action.DROP)
        if key == API_VERSIONS_KEY and self._state is not _State.RAW:
            return None
        if self._state is _State.RAW:
            return Outcome(Action.CLOSE, reason="SASL v0 raw tokens are not read")
        if key not in (HANDSHAKE_KEY, AUTHENTICATE_KEY):
            return Outcome(Action.CLOSE, reason=f"api {key} before authentication")
        if request.error is not None:
            return Outcome(Action.CLOSE, reason=f"{request.error.name}: {request.detail}")
        if key == HANDSHAKE_KEY:
            return self._handshake(request)
        return self._authenticate(request)

    def _handshake(self, request) -> Outcome:
        enabled = list(self._settings.enabled_mechanisms)
        if self._state is not _State.HANDSHAKE:
            return Outcome(Action.ANSWER_AND_CLOSE, sasl_handshake.Response(
                error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=enabled),
                "SaslHandshake out of turn")
        mechanism = request.body.mechanism
        if mechanism not in enabled:
            self._state = _State.FAILED
            return Outcome(Action.FAIL, sasl_handshake.Response(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled),
                f"unsupported SASL mechanism {mechanism!r}")
        if request.header.api_version == 0:
            self._state = _State.RAW
        else:
            self._state = _State.AUTHENTICATE
            self._server = self._mechanism_server(mechanism)
        return Outcome(Action.ANSWER, sasl_handshake.Response(error_code=0, mechanisms=enabled))

    def _mechanism_server(self, mechanism: str):
        if mechanism == PLAIN:
            return PlainServer(self._check_plain)
        assert mechanism in SCRAM_MECHANISMS
        return ScramServer(mechanism, lambda user: self._scram.lookup(user, mechanism),
                           self._nonce())

    def _check_plain(self, user: str, password: str) -> bool:
        expected = self._settings.plain_users.get(user)
        # compare even for an unknown user, so the time taken does not say who exists
        ok = hmac.compare_digest((expected or "\0").encode(), password.encode())
        return ok and expected is not None

    def _authenticate(self, request) -> Outcome:
        if self._state is not _State.AUTHENTICATE:
            return Outcome(Action.ANSWER_AND_CLOSE, sasl_authenticate.Response(
                error_code=ErrorCode.ILLEGAL_SASL_STATE, auth_bytes=b"",
                error_message="SaslAuthenticate before SaslHandshake"),
                "SaslAuthenticate out of turn")
        try:
            token = self._server.respond(request.body.auth_bytes)
        except SaslFailure as failure:
            self._state = _State.FAILED
            return Outcome(Action.FAIL, sasl_authenticate.Response(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(failure),
                auth_bytes=b""), str(failure))
        if self._server.complete:
            self._state = _State.DONE
            self.principal = f"User:{self._server.username}"
            self._server = None
        return Outcome(Action.ANSWER, sasl_authenticate.Response(
            error_code=0, error_message=None, auth_bytes=token, session_lifetime_ms=0))
