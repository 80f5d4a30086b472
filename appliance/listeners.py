"""Kafka's `listeners` and `advertised.listeners`: several named endpoints, and which one the
brokers talk to each other on.

An appliance serves every listener of `listeners` (each worker on the listener's port plus its
index); `advertised.listeners` says where clients and other appliances reach each of them.
Kafka's rules and messages hold: distinct names, distinct ports among `listeners` (advertised
listeners may share one), an advertised listener names a configured one, and the inter-broker
listener is `inter.broker.listener.name` or the listener named like
`security.inter.broker.protocol` (default PLAINTEXT), never both keys. An appliance alone with
no listener of that name (a single `SASL_SSL://` listener, as before several listeners were
served) keeps its first listener as the inter-broker one, so a file that loaded before still
loads; a fleet, whose appliances really dial it, gets Kafka's refusal.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

DEFAULT_INTER_BROKER_PROTOCOL = "PLAINTEXT"


@dataclass(frozen=True)
class Listener:
    """One `NAME://host:port` endpoint. `name` is the listener's name (Kafka's
    `listeners=CLIENT://...`); its security protocol comes from
    `listener.security.protocol.map`, where by default each protocol names itself."""

    host: str
    port: int
    name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"

    @classmethod
    def parse(cls, text: str) -> Listener:
        """The endpoint as written; its protocol is the name's own until `with_protocol`."""
        scheme, sep, rest = text.strip().partition("://")
        if not sep or not scheme:
            raise ValueError(f"expected NAME://host:port, got {text!r}")
        host, colon, port = rest.rpartition(":")
        if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"expected host:port after {scheme}://, got {rest!r}")
        name = scheme.upper()
        return cls(host.strip("[]") or "0.0.0.0", int(port), name, name)

    def with_protocol(self, protocol_map: dict[str, str]) -> Listener:
        """This listener with its security protocol from `protocol_map`. Raises ValueError
        for a name the map does not have."""
        protocol = protocol_map.get(self.name)
        if protocol is None:
            raise ValueError(f"listener name {self.name!r} has no security protocol in "
                             f"listener.security.protocol.map")
        return dataclasses.replace(self, security_protocol=protocol)

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(text: str, *, distinct_ports: bool = True) -> tuple[Listener, ...]:
    """`NAME://host:port[,NAME2://host:port...]` with Kafka's checks: each name once, and
    (for `listeners`, not `advertised.listeners`) each port once."""
    entries = tuple(Listener.parse(e) for e in text.split(",") if e.strip())
    if not entries:
        raise ValueError("expected NAME://host:port[,NAME2://host:port...]")
    if len({e.name for e in entries}) != len(entries):
        raise ValueError(f"Each listener must have a different name, listeners: {text.strip()}")
    if distinct_ports:
        ports = [e.port for e in entries if e.port != 0]
        if len(set(ports)) != len(ports):
            raise ValueError(f"Each listener must have a different port, listeners: "
                             f"{text.strip()}")
    return entries


def check_port_ranges(listeners: tuple[Listener, ...], workers: int) -> str | None:
    """Each worker serves listener port + its index: two listeners whose ranges overlap would
    bind one port twice. The problem, or None."""
    taken: dict[int, Listener] = {}
    for listener in listeners:
        if listener.port == 0:
            continue
        for port in range(listener.port, listener.port + workers):
            other = taken.setdefault(port, listener)
            if other is not listener:
                return (f"{other} and {listener} overlap: each of the {workers} workers "
                        f"(one per log.dirs entry) serves a listener on its port + the "
                        f"worker's index; space the ports at least {workers} apart")
    return None


def check_advertised(listeners: tuple[Listener, ...],
                     advertised: tuple[Listener, ...]) -> str | None:
    """Kafka's rule: advertised listener names are among the configured ones."""
    names = [listener.name for listener in listeners]
    unknown = [a.name for a in advertised if a.name not in names]
    if unknown:
        return (f"advertised.listeners listener names must be equal to or a subset of the "
                f"ones defined in listeners. Found {','.join(a.name for a in advertised)}. The "
                f"valid options based on the current configuration are {','.join(names)}")
    return None


def inter_broker_name(listeners: tuple[Listener, ...], advertised: tuple[Listener, ...],
                      *, listener_name: str | None, protocol: str | None,
                      in_fleet: bool) -> str:
    """The name of the inter-broker listener, as Kafka resolves it; raises ValueError with
    Kafka's message when it cannot be served."""
    if listener_name is not None and protocol is not None:
        raise ValueError("Only one of inter.broker.listener.name and "
                         "security.inter.broker.protocol should be set.")
    explicit = listener_name is not None or protocol is not None
    name = (listener_name or protocol or DEFAULT_INTER_BROKER_PROTOCOL).strip().upper()
    names = [a.name for a in advertised]
    if name in names:
        return name
    if not explicit and not in_fleet:
        return listeners[0].name  # alone, nothing dials it: as before several listeners
    key = "inter.broker.listener.name" if listener_name is not None or not explicit else \
        "security.inter.broker.protocol"
    raise ValueError(f"{key}: inter.broker.listener.name must be a listener name defined in "
                     f"advertised.listeners. The valid options based on currently configured "
                     f"listeners are {','.join(names)} (got {name})")
