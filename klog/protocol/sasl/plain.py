"""SASL PLAIN, server side (RFC 4616): one message, ``authzid NUL authcid NUL passwd``.

As Kafka's PlainSaslServer: the authorization id must be empty or the user's own name, the
user name and password must not be empty, and one message completes the exchange (the
server's answer is empty). The password check is the caller's ``check(user, password)``,
which must compare in constant time.
"""

from __future__ import annotations

from collections.abc import Callable

from klog.protocol.sasl import SaslFailure

INVALID = "Authentication failed: Invalid username or password"


class PlainServer:
    def __init__(self, check: Callable[[str, str], bool]) -> None:
        self._check = check
        self.complete = False
        self.username: str | None = None

    def respond(self, token: bytes) -> bytes:
        """Verify the one PLAIN message. Raises SaslFailure."""
        if self.complete:
            raise SaslFailure("Authentication failed: PLAIN takes one message")
        try:
            parts = bytes(token).decode("utf-8").split("\0")
        except UnicodeDecodeError:
            raise SaslFailure("Authentication failed: PLAIN message is not UTF-8") from None
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens, got "
                              f"{len(parts)}")
        authzid, username, password = parts
        if not username:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        if authzid and authzid != username:
            raise SaslFailure("Authentication failed: Client requested an authorization id "
                              "that is different from username")
        if not self._check(username, password):
            raise SaslFailure(INVALID)
        self.complete, self.username = True, username
        return b""
