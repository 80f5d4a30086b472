"""The appliance's TLS as a client: what its replica fetchers dial a leader's TLS inter-broker
endpoint with.

The leader is verified with the listener's own truststore (`ssl.truststore.*`, the system's
CAs when none is set), hostname included (Kafka's default
`ssl.endpoint.identification.algorithm=https`), and the appliance presents its own keystore
as its client certificate, for a listener with `ssl.client.auth` set.
"""

from __future__ import annotations

import ssl

from appliance.config import BrokerConfig
from appliance.tls.context import _VERSIONS, _load_keystore, _load_truststore


def build_client_context(config: BrokerConfig) -> ssl.SSLContext:
    """A TLS 1.2/1.3 client context from `config`'s ssl.* settings (a listener's view:
    `BrokerConfig.tls_config`); raises ConfigError naming the key and file that do not
    load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    versions = sorted(_VERSIONS[v] for v in config.ssl_enabled_protocols)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    if config.ssl_truststore_location is None and config.ssl_truststore_certificates is None:
        context.load_default_certs()
    else:
        _load_truststore(context, config)
    if config.ssl_keystore_location is not None or config.ssl_keystore_key is not None:
        _load_keystore(context, config)
    return context
