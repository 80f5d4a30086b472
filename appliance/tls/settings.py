"""Kafka's `ssl.*` broker keys: how each parses, and what an SSL listener requires.

Only PEM keystores and truststores load (Python's `ssl` reads PEM): a Kafka file naming JKS or
PKCS12 is refused at start with the key named, rather than failing at the first handshake.
Only TLS 1.2 and 1.3 are served. `listener.name.<listener>.ssl.<key>` (Kafka's per-listener
form) overrides `ssl.<key>` for that listener.
"""

from __future__ import annotations

from pathlib import Path

TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
REFUSED_PROTOCOLS = ("SSLv2", "SSLv3", "TLSv1", "TLSv1.1")
CLIENT_AUTH = ("none", "requested", "required")
TLS_SECURITY_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})


def _store_type():
    def parse(text: str) -> str:
        value = text.strip().upper()
        if value != "PEM":
            raise ValueError(f"klog reads PEM stores only, got {text.strip()!r} (convert a "
                             f"JKS or PKCS12 store to PEM with keytool and openssl)")
        return value

    return parse


def _path(text: str) -> Path:
    if not text.strip():
        raise ValueError("expected a file path")
    return Path(text.strip())


def _pem_text(text: str) -> str:
    """Kafka's inline PEM values: the PEM text itself (newlines may be escaped as \\n in a
    properties file, which the properties reader has already turned back)."""
    if "-----BEGIN " not in text:
        raise ValueError("expected PEM text (-----BEGIN ...)")
    return text.strip() + "\n"


def _secret(text: str) -> str:
    return text


def _client_auth(text: str) -> str:
    value = text.strip().lower()
    if value not in CLIENT_AUTH:
        raise ValueError(f"expected one of {', '.join(CLIENT_AUTH)}, got {text.strip()!r}")
    return value


def _protocols(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise ValueError(f"expected a list of {', '.join(TLS_PROTOCOLS)}")
    for name in names:
        if name in REFUSED_PROTOCOLS:
            raise ValueError(f"{name} is not secure; klog serves {', '.join(TLS_PROTOCOLS)} only")
        if name not in TLS_PROTOCOLS:
            raise ValueError(f"unknown protocol {name!r}; expected {', '.join(TLS_PROTOCOLS)}")
    return names


def _protocol(text: str) -> str:
    """`ssl.protocol`: Kafka's SSLContext algorithm. Python negotiates the best of
    `ssl.enabled.protocols`, so this is only checked."""
    value = text.strip()
    if value not in (*TLS_PROTOCOLS, "TLS"):
        raise ValueError(f"expected TLSv1.2, TLSv1.3 or TLS, got {value!r}")
    return value


def _cipher_suites(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _store_password(text: str) -> str:
    raise ValueError("a PEM store has no store password (Kafka refuses it too); an encrypted "
                     "private key's password is ssl.key.password")


# Kafka key -> (BrokerConfig field, parser); merged into appliance.config.KEYS
SSL_KEYS: dict[str, tuple[str, object]] = {
    "ssl.keystore.type": ("ssl_keystore_type", _store_type()),
    "ssl.keystore.location": ("ssl_keystore_location", _path),
    "ssl.keystore.key": ("ssl_keystore_key", _pem_text),
    "ssl.keystore.certificate.chain": ("ssl_keystore_certificate_chain", _pem_text),
    "ssl.key.password": ("ssl_key_password", _secret),
    "ssl.truststore.type": ("ssl_truststore_type", _store_type()),
    "ssl.truststore.location": ("ssl_truststore_location", _path),
    "ssl.truststore.certificates": ("ssl_truststore_certificates", _pem_text),
    "ssl.client.auth": ("ssl_client_auth", _client_auth),
    "ssl.enabled.protocols": ("ssl_enabled_protocols", _protocols),
    "ssl.protocol": ("ssl_protocol", _protocol),
    "ssl.cipher.suites": ("ssl_cipher_suites", _cipher_suites),
    "ssl.keystore.password": ("", _store_password),
    "ssl.truststore.password": ("", _store_password),
}

# Kafka's JVM-specific TLS keys: accepted (listed as ignored) so a Kafka file loads.
# ssl.endpoint.identification.algorithm is the broker's own client setting (inter-broker
# TLS, a later slice).
SSL_IGNORED = frozenset({
    "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation", "ssl.endpoint.identification.algorithm",
    "ssl.provider", "ssl.engine.factory.class",
})

PER_LISTENER_PREFIX = "listener.name."


def split_listener_ssl(settings: dict[str, str]) -> tuple[
        dict[str, str], dict[str, list[tuple[str, str, str]]]]:
    """`listener.name.<name>.ssl.*` keys taken out of `settings`, per listener (upper-case
    name; Kafka writes it in lower case, any case matches) as (key as written, `ssl.*` key,
    value): each overrides `ssl.*` for that listener only. Other `listener.name.*` keys
    (SASL's) are left as they are."""
    result = dict(settings)
    per_listener: dict[str, list[tuple[str, str, str]]] = {}
    for key in list(settings):
        if not key.startswith(PER_LISTENER_PREFIX):
            continue
        name, dot, rest = key[len(PER_LISTENER_PREFIX):].partition(".")
        if not dot or not name or not rest.startswith("ssl."):
            continue
        per_listener.setdefault(name.upper(), []).append((key, rest, result.pop(key)))
    return result, per_listener


def check_tls_listener(config, key: str) -> str | None:
    """Why an SSL listener cannot start with `config` (None: it can). The files themselves are
    loaded by `appliance.tls.context`, which names the one that fails."""
    inline = (config.ssl_keystore_key, config.ssl_keystore_certificate_chain)
    if config.ssl_keystore_location is None and not all(inline):
        if any(inline):
            return ("ssl.keystore.key and ssl.keystore.certificate.chain go together: "
                    f"{key} is an SSL listener")
        return f"{key} is an SSL listener and ssl.keystore.location is not set"
    if config.ssl_keystore_location is not None and any(inline):
        return "set ssl.keystore.location or ssl.keystore.key, not both"
    if (config.ssl_client_auth != "none" and config.ssl_truststore_location is None
            and config.ssl_truststore_certificates is None):
        return (f"ssl.client.auth={config.ssl_client_auth} needs the CAs that sign client "
                f"certificates: ssl.truststore.location is not set")
    return None
