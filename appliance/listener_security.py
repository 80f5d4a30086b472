"""How an appliance's listeners are secured: each listener's security protocol, its TLS and
SASL settings (`listener.name.<l>.*` over the broker-wide keys), the inter-broker listener and
the credentials replica fetchers present on it, and the advertised addresses a fleet dials.

Kept apart from appliance/config.py (which types every key) because these rules relate keys
to each other, the way Kafka's `KafkaConfig` validation and `ListenerName` handling do, and
they grow with each security feature.
"""

from __future__ import annotations

import dataclasses
import socket
from typing import TYPE_CHECKING

from appliance.config_error import ConfigError
from appliance.inter_broker import inter_broker_sasl
from appliance.listeners import check_advertised, check_port_ranges, inter_broker_name
from appliance.sasl_config import (
    LISTENER_PREFIX,
    check_suffix,
    listener_settings,
    split_listener_key,
)
from appliance.tls.settings import SSL_IGNORED, SSL_KEYS, check_tls_listener

if TYPE_CHECKING:
    from appliance.config import BrokerConfig

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's default listener.security.protocol.map: each protocol is also a listener name
DEFAULT_PROTOCOL_MAP = {name: name for name in SECURITY_PROTOCOLS}
SERVED_PROTOCOLS = frozenset(SECURITY_PROTOCOLS)  # SASL_SSL: TLS, then SASL on it


def parse_protocol_map(text: str) -> dict[str, str]:
    """`NAME:PROTOCOL[,NAME:PROTOCOL...]`, as Kafka's listener.security.protocol.map."""
    found = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, colon, protocol = entry.partition(":")
        protocol = protocol.strip().upper()
        if not colon or not name.strip():
            raise ValueError(f"expected NAME:PROTOCOL, got {entry!r}")
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"{protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
        found[name.strip().upper()] = protocol
    if not found:
        raise ValueError("expected NAME:PROTOCOL[,NAME:PROTOCOL...]")
    return found



def resolve_protocols(config: BrokerConfig, source: str) -> BrokerConfig:
    """The listeners with their security protocols, the advertised ones among them, and the
    inter-broker listener resolved, with Kafka's refusals."""
    resolved = {}
    for key, field_name in (("listeners", "listeners"),
                            ("advertised.listeners", "advertised_listeners")):
        listeners = getattr(config, field_name)
        if listeners is None:
            continue
        try:
            listeners = tuple(listener.with_protocol(config.listener_security_protocol_map)
                              for listener in listeners)
        except ValueError as exc:
            raise ConfigError(f"{source}: bad value for {key!r}: {exc}") from None
        for listener in listeners:
            if listener.security_protocol not in SERVED_PROTOCOLS:
                raise ConfigError(f"{source}: bad value for {key!r}: {listener} is a "
                                  f"{listener.security_protocol} listener; klog serves "
                                  f"{', '.join(sorted(SERVED_PROTOCOLS))} only")
        resolved[field_name] = listeners
    listeners = resolved["listeners"]
    advertised = resolved.get("advertised_listeners")
    problem = check_port_ranges(listeners, len(config.log_dirs))
    if problem is None and advertised is not None:
        problem = check_advertised(listeners, advertised)
    if problem is not None:
        raise ConfigError(f"{source}: bad value for 'listeners': {problem}"
                          if "advertised" not in problem else f"{source}: {problem}")
    config = dataclasses.replace(config, **resolved)
    try:
        name = inter_broker_name(listeners, config.advertised_endpoints,
                                 listener_name=config.inter_broker_listener_name,
                                 protocol=config.security_inter_broker_protocol,
                                 in_fleet=config.zookeeper_connect is not None)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return dataclasses.replace(config, inter_broker_name=name)


def resolve_listener_ssl(config: BrokerConfig, per_listener: dict[str, list[tuple[str, str, str]]],
                       source: str) -> BrokerConfig:
    """Each TLS listener's `listener.name.<l>.ssl.*` overrides, parsed, and every TLS
    listener checked with them; those of other listeners are listed as ignored."""
    names = {listener.name: listener for listener in config.listeners}
    overrides: dict[str, dict[str, object]] = {}
    ignored = []
    for name, entries in per_listener.items():
        listener = names.get(name)
        for key, ssl_key, raw in entries:
            if listener is None or not listener.uses_tls or ssl_key in SSL_IGNORED:
                ignored.append(key)
                continue
            if ssl_key not in SSL_KEYS:
                raise ConfigError(f"{source}: unknown key {key!r}")
            target, parse = SSL_KEYS[ssl_key]
            try:
                overrides.setdefault(name, {})[target] = parse(raw)
            except ValueError as exc:
                raise ConfigError(f"{source}: bad value for {key!r}: {exc}") from None
    config = dataclasses.replace(config, listener_ssl=overrides,
                                 ignored_keys=config.ignored_keys + tuple(ignored))
    for listener in config.listeners:
        if listener.uses_tls:
            problem = check_tls_listener(config.tls_config(listener.name),
                                         f"listeners={listener}")
            if problem is not None:
                raise ConfigError(f"{source}: {problem}")
    return config


def resolve_sasl(config: BrokerConfig, keys: dict[str, str], source: str) -> BrokerConfig:
    """Each SASL listener's settings, and the replica fetchers' credentials when the
    inter-broker listener is SASL; the `listener.name.*` keys of other listeners, and SASL
    keys without a SASL listener, are listed as ignored."""
    names = {listener.name: listener for listener in config.listeners}
    by_listener: dict[str, dict[str, str]] = {}
    ignored = []
    for key, value in keys.items():
        if key == "sasl.enabled.mechanisms":
            continue
        try:
            name, suffix = split_listener_key(key)
            check_suffix(key, suffix, source)
        except ValueError as exc:
            raise ConfigError(str(exc) if str(exc).startswith(source)
                              else f"{source}: bad key {key!r}: {exc}") from None
        if name in names and names[name].uses_sasl:
            by_listener.setdefault(name, {})[suffix] = value
        else:
            ignored.append(key)
    sasl_listeners = [listener for listener in config.listeners if listener.uses_sasl]
    if not sasl_listeners:
        ignored += [k for k in keys if k not in ignored]
        if config.sasl_mechanism_inter_broker_protocol is not None:
            ignored.append("sasl.mechanism.inter.broker.protocol")
        return dataclasses.replace(config, ignored_keys=config.ignored_keys + tuple(ignored))
    found = {}
    for listener in sasl_listeners:
        ours = by_listener.get(listener.name, {})
        try:
            found[listener.name], unused = listener_settings(
                listener.name, ours, source=source,
                default_mechanisms=keys.get("sasl.enabled.mechanisms"))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if "sasl.enabled.mechanisms" in ours and "sasl.enabled.mechanisms" in keys:
            unused.append("sasl.enabled.mechanisms")  # the listener's own list wins (Kafka)
        ignored += unused
    config = dataclasses.replace(config, listener_sasl=found)
    inter = config.inter_broker_listener
    credentials = None
    if inter.uses_sasl and (config.zookeeper_connect is not None
                            or config.sasl_mechanism_inter_broker_protocol is not None):
        try:
            credentials = inter_broker_sasl(
                inter.name, found[inter.name].enabled_mechanisms,
                config.sasl_mechanism_inter_broker_protocol, by_listener.get(inter.name, {}),
                source=source)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        used = (f"{LISTENER_PREFIX}{inter.name}.{credentials.mechanism}"
                f".sasl.jaas.config").lower()
        ignored = [k for k in ignored if k.lower() != used]
    elif config.sasl_mechanism_inter_broker_protocol is not None:
        ignored.append("sasl.mechanism.inter.broker.protocol")
    return dataclasses.replace(config, inter_broker_sasl=credentials,
                               ignored_keys=config.ignored_keys
                               + tuple(dict.fromkeys(ignored)))


WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "*"})


def check_advertised_listener(config: BrokerConfig, resolve=socket.getaddrinfo) -> None:
    """In a fleet, other appliances and every client dial the advertised addresses: a wildcard
    or a name that does not resolve would let bootstrap work and then strand clients (one of
    Kafka's commonest mistakes), so start-up stops here, naming the key."""
    key = "advertised.listeners" if config.advertised_listeners else "listeners"
    for endpoint in config.advertised_endpoints:
        if endpoint.host in WILDCARD_HOSTS:
            raise ConfigError(f"{key}: {endpoint} is a wildcard address; a fleet needs "
                              f"the address clients and other appliances reach this host at "
                              f"(set advertised.listeners)")
        try:
            resolve(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise ConfigError(f"{key}: the host of {endpoint} does not resolve: "
                              f"{exc}") from None
