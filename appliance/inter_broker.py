"""The broker's own client side on the inter-broker listener: what a replica fetcher
authenticates with when it dials the leader's endpoint of that listener.

Kafka reads it from `sasl.mechanism.inter.broker.protocol` (default GSSAPI, which klog does
not serve, so a fleet whose inter-broker listener is SASL must name PLAIN or SCRAM-SHA-*) and
the `username` / `password` options of the listener's
`listener.name.<listener>.<mechanism>.sasl.jaas.config` entry (for PLAIN the same entry's
`user_<name>` options are the server side). TLS needs nothing more: the fetcher verifies the
leader with the listener's truststore and presents its keystore.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.sasl_config import LISTENER_PREFIX, parse_jaas
from klog.protocol.sasl import SUPPORTED_MECHANISMS


@dataclass(frozen=True)
class InterBrokerSasl:
    mechanism: str
    username: str
    password: str = field(repr=False)


def inter_broker_sasl(listener: str, enabled: tuple[str, ...], mechanism: str | None,
                      jaas_by_suffix: dict[str, str], *, source: str) -> InterBrokerSasl:
    """The credentials a replica fetcher sends on the SASL inter-broker `listener`, whose
    server side enables `enabled`; `jaas_by_suffix` are its `listener.name.<l>.*` keys.
    Raises ValueError naming the key."""
    if mechanism is None:
        raise ValueError(f"{source}: the inter-broker listener {listener} is SASL: set "
                         f"sasl.mechanism.inter.broker.protocol (Kafka's default, GSSAPI, is "
                         f"not served; klog serves {', '.join(SUPPORTED_MECHANISMS)})")
    if mechanism not in enabled:
        raise ValueError(f"{source}: sasl.mechanism.inter.broker.protocol must be included in "
                         f"sasl.enabled.mechanisms when SASL is used for inter-broker "
                         f"communication ({mechanism} is not among "
                         f"{', '.join(enabled)} of listener {listener})")
    suffix = f"{mechanism.lower()}.sasl.jaas.config"
    key = f"{LISTENER_PREFIX}{listener.lower()}.{suffix}"
    text = jaas_by_suffix.get(suffix)
    if text is None:
        raise ValueError(f"{source}: the inter-broker listener {listener} authenticates with "
                         f"{mechanism}: set {key} with username=\"...\" password=\"...\"")
    try:
        options = parse_jaas(text)[0].options
    except (ValueError, IndexError) as exc:
        raise ValueError(f"{source}: bad value for {key!r}: {exc or 'no login module'}"
                         ) from None
    if "username" not in options or "password" not in options:
        raise ValueError(f"{source}: {key} has no username=\"...\" password=\"...\": the "
                         f"broker's own credentials for inter-broker calls")
    return InterBrokerSasl(mechanism, options["username"], options["password"])


def parse_mechanism(text: str) -> str:
    """`sasl.mechanism.inter.broker.protocol`: one mechanism klog serves."""
    name = text.strip().upper()
    if name not in SUPPORTED_MECHANISMS:
        raise ValueError(f"{name or text!r} is not served; klog serves "
                         f"{', '.join(SUPPORTED_MECHANISMS)} (Kafka's default GSSAPI is not)")
    return name
