"""SCRAM-SHA-256 and SCRAM-SHA-512, server side (RFC 5802, RFC 7677), as Kafka speaks them.

The exchange, two tokens each way::

    client-first  n,[a=authzid],n=user,r=cnonce[,ext...]
    server-first  r=cnonce+snonce,s=base64(salt),i=iterations
    client-final  c=base64(gs2 header),r=cnonce+snonce[,ext...],p=base64(ClientProof)
    server-final  v=base64(ServerSignature)

The server keeps only a :class:`ScramCredential` per user and mechanism, (salt, iterations,
StoredKey, ServerKey), never the password: the proof is checked as H(proof XOR
HMAC(StoredKey, AuthMessage)) == StoredKey. Channel binding is refused (``p=`` in the gs2
header), and so is Kafka's ``tokenauth`` extension (klog has no delegation tokens); other
extensions are ignored. The server nonce is the caller's, so this module stays pure.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass

from klog.protocol.sasl import SCRAM_SHA_256, SCRAM_SHA_512, SaslFailure

HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism minimum for both
MAX_ITERATIONS = 16384  # and its maximum
INVALID = "Authentication failed: Invalid user credentials"


@dataclass(frozen=True)
class ScramCredential:
    """What the server stores for one user and mechanism (RFC 5802 section 3)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def make_credential(mechanism: str, password: str, salt: bytes,
                    iterations: int) -> ScramCredential:
    """The salted credential for ``password``; the caller picks the salt (random, 16+ bytes)."""
    salted = hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode("utf-8"), salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


def credential_from_salted(mechanism: str, salted_password: bytes, salt: bytes,
                           iterations: int) -> ScramCredential:
    """The credential of a password already salted (PBKDF2) by the client, as
    AlterUserScramCredentials carries it (KIP-554): the password itself never travels."""
    name = HASHES[mechanism]
    client_key = hmac.digest(salted_password, b"Client Key", name)
    return ScramCredential(salt, iterations, hashlib.new(name, client_key).digest(),
                           hmac.digest(salted_password, b"Server Key", name))


def _attributes(text: str) -> list[tuple[str, str]]:
    """``a=x,b=y`` as pairs (Kafka's extensions have longer keys); a part without ``=`` fails."""
    pairs = []
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise SaslFailure(f"Invalid SCRAM message: bad attribute {part[:32]!r}")
        pairs.append((key, value))
    return pairs


def _saslname(value: str) -> str:
    """RFC 5802's escaping of ``,`` and ``=`` in names."""
    if "=" in value.replace("=2C", "").replace("=3D", ""):
        raise SaslFailure("Invalid SCRAM message: bad escape in name")
    return value.replace("=2C", ",").replace("=3D", "=")


def _b64(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise SaslFailure("Invalid SCRAM message: bad base64") from None


class ScramServer:
    """One SCRAM exchange. ``lookup(user)`` gives the user's credential for this mechanism,
    or None; ``server_nonce`` is printable ASCII without commas (the caller's randomness)."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None],
                 server_nonce: str) -> None:
        self._hash = HASHES[mechanism]
        self._lookup = lookup
        self._server_nonce = server_nonce
        self._step = 0
        self._credential: ScramCredential | None = None
        self._gs2_header = self._client_first_bare = self._server_first = self._nonce = ""
        self._client_nonce = ""
        self.complete = False
        self.username: str | None = None

    def respond(self, token: bytes) -> bytes:
        """The answer to the client's next message. Raises SaslFailure."""
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SCRAM message: not UTF-8") from None
        if self._step == 0:
            self._step = 1
            return self._first(text).encode()
        if self._step == 1:
            self._step = 2
            return self._final(text).encode()
        raise SaslFailure("Invalid SCRAM message: the exchange is over")

    def _first(self, text: str) -> str:
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or flag not in ("n", "y"):
            raise SaslFailure("Invalid SCRAM message: bad gs2 header (channel binding is "
                              "not supported)")
        if authzid and not authzid.startswith("a="):
            raise SaslFailure("Invalid SCRAM message: bad authorization id")
        attributes = _attributes(bare)
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise SaslFailure("Invalid SCRAM message: expected n=user,r=nonce")
        username, client_nonce = _saslname(attributes[0][1]), attributes[1][1]
        extensions = dict(attributes[2:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise SaslFailure("Authentication failed: delegation tokens are not supported")
        if authzid and _saslname(authzid[2:]) != username:
            raise SaslFailure("Authentication failed: authorization id differs from the user")
        if not username or not client_nonce:
            raise SaslFailure("Invalid SCRAM message: empty user or nonce")
        credential = self._lookup(username)
        if credential is None:
            raise SaslFailure(INVALID)
        self._credential, self.username = credential, username
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._client_nonce = client_nonce
        self._nonce = client_nonce + self._server_nonce
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first

    def _final(self, text: str) -> str:
        without_proof, sep, proof = text.rpartition(",p=")
        if not sep:
            raise SaslFailure("Invalid SCRAM message: no proof")
        attributes = _attributes(without_proof)
        if len(attributes) < 2 or attributes[0][0] != "c" or attributes[1][0] != "r":
            raise SaslFailure("Invalid SCRAM message: expected c=...,r=...,p=...")
        if _b64(attributes[0][1]) != self._gs2_header.encode():
            raise SaslFailure("Invalid SCRAM message: channel binding differs")
        if attributes[1][1] not in (self._nonce, self._client_nonce + self._nonce):
            # the second form is librdkafka's before 2.6.1 (kcat 1.7 / librdkafka 2.0.2 among
            # them), which prepends its own nonce again; Kafka 3.8.1 accepts it too
            raise SaslFailure("Invalid SCRAM message: nonce differs")
        credential = self._credential
        assert credential is not None
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 without_proof)).encode()
        client_proof = _b64(proof)
        signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        if len(client_proof) != len(signature):
            raise SaslFailure(INVALID)
        client_key = bytes(a ^ b for a, b in zip(client_proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(),
                                   credential.stored_key):
            raise SaslFailure(INVALID)
        self.complete = True
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        return "v=" + base64.b64encode(server_signature).decode()
