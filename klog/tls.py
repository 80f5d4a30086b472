"""TLS for klog's clients: kafka-python's option names, a verifying SSLContext.

``security_protocol="SSL"`` (or ``"SASL_SSL"``, SASL on it) with ``ssl_cafile`` (the CA that
signed the brokers' certificates; the system's CAs without it) verifies each broker's
certificate and, unless ``ssl_check_hostname=False``, that it names the host dialled.
``ssl_certfile`` / ``ssl_keyfile`` / ``ssl_password`` present a client certificate (a broker
with ``ssl.client.auth=required`` takes its subject as the principal). TLS 1.2 and 1.3 only.
"""

from __future__ import annotations

import ssl
from typing import Any

__all__ = ["SECURITY_PROTOCOLS", "client_ssl_context", "ssl_context_of"]

# SASL_PLAINTEXT and SASL_SSL: klog/security.py's SASL, the latter on this TLS
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")


def client_ssl_context(*, security_protocol: str = "PLAINTEXT", ssl_cafile: str | None = None,
                       ssl_certfile: str | None = None, ssl_keyfile: str | None = None,
                       ssl_password: str | None = None,
                       ssl_check_hostname: bool = True) -> ssl.SSLContext | None:
    """The context broker connections are wrapped in, or None for PLAINTEXT. A file that
    does not load is a ValueError naming the option."""
    protocol = str(security_protocol).upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"security_protocol={security_protocol!r}: expected one of "
                         f"{', '.join(SECURITY_PROTOCOLS)}")
    if protocol not in TLS_PROTOCOLS:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = bool(ssl_check_hostname)
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        if ssl_cafile:
            context.load_verify_locations(cafile=ssl_cafile)
        else:
            context.load_default_certs()
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"ssl_cafile={ssl_cafile!r}: cannot load it: {exc}") from None
    if ssl_certfile:
        try:
            context.load_cert_chain(ssl_certfile, ssl_keyfile,
                                    password=lambda: ssl_password or "")
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(f"ssl_certfile={ssl_certfile!r} / ssl_keyfile={ssl_keyfile!r}: "
                             f"cannot load them: {exc}") from None
    elif ssl_keyfile:
        raise ValueError("ssl_keyfile without ssl_certfile")
    return context


def ssl_context_of(config: Any) -> ssl.SSLContext | None:
    """The context of a client config (klog.config's dataclasses carry the options)."""
    return client_ssl_context(
        security_protocol=config.security_protocol, ssl_cafile=config.ssl_cafile,
        ssl_certfile=config.ssl_certfile, ssl_keyfile=config.ssl_keyfile,
        ssl_password=config.ssl_password, ssl_check_hostname=config.ssl_check_hostname)
