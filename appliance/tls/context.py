"""The server's SSLContext, built from Kafka's `ssl.*` settings, and its reload on SIGHUP.

`build_server_context` raises `ConfigError` naming the key and the file that does not load (a
wrong password, a file that is not PEM), so a bad keystore stops start-up with one line, not a
traceback. The supervisor builds one at start to check the files; each worker builds its own
after the fork.

Reload: asyncio's server keeps the SSLContext it was created with, and replacing a certificate
inside a live context is not atomic (a new certificate could meet the old key). So the context
the server holds stays, and its `sni_callback` (which OpenSSL calls on every ClientHello, with
server name None when the client sends none) moves each new handshake onto the most recently
loaded context: new connections get the new certificate, open ones keep theirs, and a reload
whose files do not load changes nothing.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from pathlib import Path

from appliance.config import BrokerConfig, ConfigError

log = logging.getLogger(__name__)

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def _reason(exc: Exception) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or exc.strerror or str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _keystore_problem(pem: str, password: str | None, exc: Exception) -> str:
    """Why a PEM keystore did not load, in the operator's terms."""
    if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError):
        return _reason(exc)
    if "-----BEGIN" not in pem:
        return "not a PEM file"
    if "PRIVATE KEY-----" not in pem:
        return "no private key in it"
    if "CERTIFICATE-----" not in pem:
        return "no certificate in it"
    if "ENCRYPTED" in pem:
        return ("the key does not decrypt: ssl.key.password is wrong" if password
                else "the key is encrypted and ssl.key.password is not set")
    return f"the key and certificate do not load: {_reason(exc)}"


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _load_keystore(context: ssl.SSLContext, config: BrokerConfig) -> None:
    password = config.ssl_key_password
    # A callable, so an encrypted key without ssl.key.password fails instead of OpenSSL
    # prompting on the terminal of a daemon.
    def secret() -> str:
        return password or ""

    if config.ssl_keystore_location is not None:
        path = config.ssl_keystore_location
        try:
            context.load_cert_chain(str(path), password=secret)
        except (ssl.SSLError, OSError, ValueError) as exc:
            problem = _keystore_problem(_read_text(path), password, exc)
            raise ConfigError(f"ssl.keystore.location: cannot load {path}: {problem} (Kafka's "
                              f"PEM keystore: the private key and its certificate chain)"
                              ) from None
        return
    # Kafka's inline form: ssl's loader reads files only, so a private temporary file
    # (0600, removed at once) holds the PEM text while it loads.
    with tempfile.TemporaryDirectory(prefix="klog-tls-") as directory:
        path = Path(directory) / "keystore.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(config.ssl_keystore_key + config.ssl_keystore_certificate_chain)
        try:
            context.load_cert_chain(str(path), password=secret)
        except (ssl.SSLError, OSError, ValueError) as exc:
            problem = _keystore_problem(path.read_text(), password, exc)
            raise ConfigError(f"ssl.keystore.key / ssl.keystore.certificate.chain do not "
                              f"load: {problem}") from None


def _load_truststore(context: ssl.SSLContext, config: BrokerConfig) -> None:
    try:
        if config.ssl_truststore_location is not None:
            context.load_verify_locations(cafile=str(config.ssl_truststore_location))
        if config.ssl_truststore_certificates is not None:
            context.load_verify_locations(cadata=config.ssl_truststore_certificates)
    except (ssl.SSLError, OSError, ValueError) as exc:
        where = (f"{config.ssl_truststore_location}" if config.ssl_truststore_location
                 else "the inline certificates")
        key = ("ssl.truststore.location" if config.ssl_truststore_location
               else "ssl.truststore.certificates")
        raise ConfigError(f"{key}: cannot load the CA certificates of {where}: "
                          f"{_reason(exc)}") from None


def build_server_context(config: BrokerConfig) -> ssl.SSLContext:
    """A TLS 1.2/1.3 server context with the keystore, truststore and client-auth of
    `config`; raises ConfigError naming the key and file that do not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(_VERSIONS[v] for v in config.ssl_enabled_protocols)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]
    # No renegotiation: a client cannot restart a handshake mid-stream, and a write in the
    # connected state is always encrypted at once (appliance/tls/fetch_writer relies on it).
    context.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
    if config.ssl_cipher_suites:
        try:
            context.set_ciphers(":".join(config.ssl_cipher_suites))
        except ssl.SSLError:
            raise ConfigError("ssl.cipher.suites: no cipher of "
                              f"{','.join(config.ssl_cipher_suites)} is available (OpenSSL "
                              "names, e.g. ECDHE-RSA-AES256-GCM-SHA384; TLS 1.3 suites are "
                              "OpenSSL's defaults)") from None
    _load_keystore(context, config)
    _load_truststore(context, config)
    context.verify_mode = _VERIFY[config.ssl_client_auth]
    return context


class ServerTls:
    """A worker's TLS: the context its server was created with, and the one new handshakes
    use after a reload."""

    def __init__(self, config: BrokerConfig):
        self.config = config
        self.context = build_server_context(config)
        self._current = self.context
        self.context.sni_callback = self._choose_context
        self.reloads = 0

    def _choose_context(self, ssl_object, server_name, context) -> None:
        if self._current is not context:
            ssl_object.context = self._current

    def reload(self) -> bool:
        """Re-read the key and trust files; on failure keep the running context and log why."""
        try:
            fresh = build_server_context(self.config)
        except ConfigError as exc:
            log.error("TLS reload failed, keeping the running certificate: %s", exc)
            return False
        self._current = fresh
        self.reloads += 1
        log.info("TLS: reloaded the keystore; new connections use it")
        return True


def check_files(config: BrokerConfig) -> None:
    """At start: raise ConfigError if the files of a TLS listener do not load."""
    for listener in config.listeners:
        if listener.uses_tls:
            build_server_context(config.tls_config(listener.name))
