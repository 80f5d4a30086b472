"""How a follower dials its leader: the inter-broker listener's endpoint, over TLS and with
SASL when that listener has them, and with the client id that tells the leader it is a replica
(`identity.py`).

Kafka's inter-broker client settings are the listener's own: the fetcher verifies the leader's
certificate and hostname with the appliance's truststore and presents its keystore, and
authenticates with `sasl.mechanism.inter.broker.protocol` and the username and password of the
listener's JAAS entry (`appliance.inter_broker`). A failed handshake or authentication raises
ConnectionError (the fetcher logs it and dials again later).
"""

from __future__ import annotations

import secrets
import ssl
from dataclasses import dataclass

from appliance.config import BrokerConfig
from appliance.inter_broker import InterBrokerSasl
from appliance.tls.client_context import build_client_context
from appliance.workers.replication.identity import replica_client_id
from klog.protocol.apis import sasl_authenticate, sasl_handshake
from klog.protocol.sasl import SaslFailure
from klog.protocol.sasl.client import new_client

SASL_AUTHENTICATE_VERSION = 2


@dataclass(frozen=True)
class LinkSecurity:
    """What a replica link needs besides the address: the listener whose endpoint it dials,
    its client id, a TLS client context (None: plaintext), SASL credentials (None: none)."""

    listener: str = ""
    client_id: str | None = None
    tls: ssl.SSLContext | None = None
    sasl: InterBrokerSasl | None = None


def link_security(config: BrokerConfig, cluster_id: str, node_id: int) -> LinkSecurity:
    """The inter-broker listener's client side for node `node_id`; raises ConfigError when
    its TLS files do not load."""
    listener = config.inter_broker_listener
    tls = (build_client_context(config.tls_config(listener.name)) if listener.uses_tls
           else None)
    sasl = config.inter_broker_sasl if listener.uses_sasl else None
    return LinkSecurity(listener.name, replica_client_id(cluster_id, node_id), tls, sasl)


async def authenticate(link, sasl: InterBrokerSasl) -> None:
    """SaslHandshake v1 then SaslAuthenticate rounds on a fresh `link`; ConnectionError if
    the leader refuses."""
    answer = await link.ask(sasl_handshake.SPEC.key, 1,
                            sasl_handshake.Request(mechanism=sasl.mechanism))
    if answer.error_code:
        raise ConnectionError(f"the leader does not enable {sasl.mechanism} (it enables "
                              f"{', '.join(answer.mechanisms)})")
    client = new_client(sasl.mechanism, sasl.username, sasl.password, secrets.token_urlsafe(24))
    token: bytes | None = client.first()
    while token is not None:
        answer = await link.ask(sasl_authenticate.SPEC.key, SASL_AUTHENTICATE_VERSION,
                                sasl_authenticate.Request(auth_bytes=token,))
        if answer.error_code:
            raise ConnectionError(f"SASL {sasl.mechanism} as {sasl.username} failed: "
                                  f"{answer.error_message}")
        try:
            token = client.respond(answer.auth_bytes)
        except SaslFailure as exc:
            raise ConnectionError(f"SASL {sasl.mechanism}: {exc}") from None
    if not client.complete:
        raise ConnectionError(f"SASL {sasl.mechanism}: the leader did not prove itself")
