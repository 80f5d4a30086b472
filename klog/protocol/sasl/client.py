"""SASL mechanisms, client side and sans-IO: what klog's own client sends in SaslAuthenticate.

Each client yields its first token with :meth:`first`, then answers each server token with
:meth:`respond` (None once nothing more is to be sent); ``complete`` turns true only after the
server proved it knows the credential too (SCRAM's server signature). A server token that
does not fit raises :class:`~klog.protocol.sasl.SaslFailure`. The nonce is the caller's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from klog.protocol.sasl import PLAIN, SCRAM_MECHANISMS, SaslFailure
from klog.protocol.sasl.scram import HASHES


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class PlainClient:
    def __init__(self, username: str, password: str) -> None:
        self._token = f"\0{username}\0{password}".encode()
        self.complete = False

    def first(self) -> bytes:
        return self._token

    def respond(self, token: bytes) -> None:
        self.complete = True
        return None


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str, nonce: str) -> None:
        self._hash = HASHES[mechanism]
        self._password = password.encode()
        self._bare = f"n={_escape(username)},r={nonce}"
        self._nonce = nonce
        self._server_signature: bytes | None = None
        self.complete = False

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def respond(self, token: bytes) -> bytes | None:
        if self._server_signature is None:
            return self._final(bytes(token).decode("utf-8", "replace"))
        text = bytes(token).decode("utf-8", "replace")
        try:
            signature = base64.b64decode(text[2:], validate=True)
        except ValueError:
            signature = b""
        if not text.startswith("v=") or not hmac.compare_digest(signature,
                                                                self._server_signature):
            raise SaslFailure("the server's SCRAM signature does not match")
        self.complete = True
        return None

    def _final(self, server_first: str) -> bytes:
        fields = dict(part.split("=", 1) for part in server_first.split(",") if "=" in part)
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), fields.get("i", "")
        if not nonce.startswith(self._nonce) or salt is None or not iterations.isdigit():
            raise SaslFailure(f"unexpected SCRAM server-first message {server_first[:64]!r}")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, base64.b64decode(salt),
                                     int(iterations))
        client_key = hmac.digest(salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", self._hash)
        self._server_signature = hmac.digest(server_key, auth_message, self._hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def new_client(mechanism: str, username: str, password: str, nonce: str):
    """The client side of ``mechanism``. Raises ValueError for one klog does not speak."""
    if mechanism == PLAIN:
        return PlainClient(username, password)
    if mechanism in SCRAM_MECHANISMS:
        return ScramClient(mechanism, username, password, nonce)
    raise ValueError(f"SASL mechanism {mechanism!r} is not supported (PLAIN, SCRAM-SHA-256, "
                     f"SCRAM-SHA-512)")
