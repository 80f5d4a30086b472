"""How the client authenticates to brokers: kafka-python's option names, one exchange.

``security_protocol`` is PLAINTEXT (the default), SSL (klog/tls.py), SASL_PLAINTEXT or
SASL_SSL (TLS first, then SASL on it); with SASL, ``sasl_mechanism`` (PLAIN, SCRAM-SHA-256 or
SCRAM-SHA-512), ``sasl_plain_username`` and ``sasl_plain_password`` are required. The
protocol is read in any case (``"sasl_ssl"``), the mechanism as written.

:func:`sasl_exchange` is the conversation every new connection has after ApiVersions, as a
generator both wire layers drive (the blocking one and the asyncio one): it yields ``(api
module, version, request body)`` and is sent each answer. SaslHandshake v1 then SaslAuthenticate
(KIP-152); a refusal raises :class:`~klog.errors.KafkaError` (UNSUPPORTED_SASL_MECHANISM,
SASL_AUTHENTICATION_FAILED, ...), which is not retriable: a wrong password stays wrong.
"""

from __future__ import annotations

import secrets
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from klog.errors import KafkaError
from klog.outgoing import version_of
from klog.protocol.apis import sasl_authenticate, sasl_handshake
from klog.protocol.error_codes import ErrorCode
from klog.protocol.sasl import SUPPORTED_MECHANISMS, SaslFailure
from klog.protocol.sasl.client import new_client

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ClientSecurity:
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.security_protocol, str):  # any case, as the Java client and
            # librdkafka read it (kafka-python compares in capitals: "sasl_ssl" there would
            # silently mean plaintext); the mechanism is a SASL name and stays as given
            object.__setattr__(self, "security_protocol", self.security_protocol.upper())
        if self.security_protocol not in PROTOCOLS:
            raise ValueError(f"security_protocol: expected one of {', '.join(PROTOCOLS)}, got "
                             f"{self.security_protocol!r}")
        if not self.sasl:
            return
        if self.sasl_mechanism not in SUPPORTED_MECHANISMS:
            raise ValueError(f"sasl_mechanism: expected one of "
                             f"{', '.join(SUPPORTED_MECHANISMS)}, got {self.sasl_mechanism!r}")
        for name in ("sasl_plain_username", "sasl_plain_password"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name}: required with security_protocol="
                                 f"{self.security_protocol}")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")


Step = tuple[Any, int, Any]


def sasl_exchange(security: ClientSecurity, versions: dict[int, int],
                  address: str) -> Generator[Step, Any, None]:
    """Authenticate one connection (see the module docstring). ``versions``: the
    negotiated ones, from ApiVersions."""
    mechanism = security.sasl_mechanism
    if versions.get(sasl_handshake.SPEC.key, 0) < 1:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "SaslHandshake v1 is needed",
                         broker=address)
    answer = yield sasl_handshake, 1, sasl_handshake.Request(mechanism=mechanism)
    if answer.error_code:
        raise KafkaError(answer.error_code, f"{mechanism} (the broker enables "
                         f"{', '.join(answer.mechanisms)})", broker=address)
    version = version_of(versions, sasl_authenticate.SPEC.key, address)
    client = new_client(mechanism, security.sasl_plain_username, security.sasl_plain_password,
                        secrets.token_urlsafe(24))
    token: bytes | None = client.first()
    while token is not None:
        answer = yield sasl_authenticate, version, sasl_authenticate.Request(auth_bytes=token)
        if answer.error_code:
            raise KafkaError(answer.error_code, answer.error_message, broker=address)
        try:
            token = client.respond(answer.auth_bytes)
        except SaslFailure as exc:
            raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc),
                             broker=address) from None
