"""SASL settings of a listener, from Kafka's keys: the mechanisms and PLAIN's users.

Kafka reads a SASL listener's server-side settings from ``sasl.enabled.mechanisms`` (or its
per-listener form ``listener.name.<listener>.sasl.enabled.mechanisms``) and, per mechanism,
``listener.name.<listener>.<mechanism>.sasl.jaas.config``, a JAAS entry with exactly one login
module. For PLAIN its ``user_<name>="<password>"`` options are the users (PlainLoginModule's
server side); the SCRAM modules' entries carry only the broker's own client credentials for
inter-broker calls, which an appliance alone does not make, so they are read and unused.
A Kafka broker has no plain ``sasl.jaas.config`` of its own (that key is a client's), and
neither does klog: a JAAS file (``java.security.auth.login.config``) is not read.

Rules, as config.py's: a key klog does not know is refused, naming it; a
``listener.name.<listener>.*`` key for another listener than the one served is listed as
ignored; a known suffix that klog does not use (SSL's, a SCRAM module's entry) is ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from klog.protocol.sasl import SUPPORTED_MECHANISMS

LISTENER_PREFIX = "listener.name."
JAAS_SUFFIX = ".sasl.jaas.config"
KAFKA_DEFAULT_MECHANISMS = ("GSSAPI",)
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
FLAGS = ("required", "requisite", "sufficient", "optional")
# listener.name.<l>.<suffix> suffixes that are accepted and not used (yet) by this slice
IGNORED_LISTENER_SUFFIX = re.compile(r"^(ssl\..*|[a-z0-9-]+\.sasl\.(login|server)\..*"
                                     r"|connections\.max\.reauth\.ms)$")


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SaslSettings:
    """What a SASL listener authenticates with. ``plain_users`` are PLAIN's user -> password,
    as the operator wrote them in the JAAS entry (Kafka keeps them the same way)."""

    enabled_mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict, repr=False)


_TOKEN = re.compile(r'\s*(?:(//[^\n]*|/\*.*?\*/)|"((?:[^"\\]|\\.)*)"|([=;])|([^\s=;"]+))', re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"'}


def _tokens(text: str) -> list[tuple[str, str]]:
    """('word'|'quoted'|'=' |';', text), as Java's StreamTokenizer in Kafka's JaasConfig."""
    out, pos, text = [], 0, text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"cannot read the JAAS entry at {text[pos:pos + 20]!r}")
        pos = match.end()
        comment, quoted, punct, word = match.groups()
        if comment is not None:
            continue
        if quoted is not None:
            out.append(("quoted", re.sub(r"\\(.)", lambda m: _ESCAPES.get(m[1], m[1]), quoted)))
        elif punct is not None:
            out.append((punct, punct))
        else:
            out.append(("word", word))
    return out


def parse_jaas(text: str) -> list[JaasEntry]:
    """Every ``LoginModule flag key=value ... ;`` entry of a JAAS config value. Raises
    ValueError saying what is wrong."""
    tokens, entries, i = _tokens(text), [], 0
    while i < len(tokens):
        if tokens[i][0] != "word" or i + 1 >= len(tokens) or tokens[i + 1][0] != "word":
            raise ValueError("expected 'LoginModuleClass flag key=value ... ;'")
        module, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in FLAGS:
            raise ValueError(f"login module control flag {tokens[i + 1][1]!r} is not one of "
                             f"{', '.join(FLAGS)}")
        i, options = i + 2, {}
        while i < len(tokens) and tokens[i][0] != ";":
            if (i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "="
                    or tokens[i + 2][0] not in ("word", "quoted")):
                raise ValueError(f"expected key=value after {module}")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ValueError(f"the entry of {module} does not end with ';'")
        entries.append(JaasEntry(module, flag, options))
        i += 1
    return entries


def plain_users(entry: JaasEntry) -> dict[str, str]:
    """PlainLoginModule's ``user_<name>="<password>"`` options, as Kafka's
    PlainServerCallbackHandler reads them."""
    return {key[5:]: value for key, value in entry.options.items()
            if key.startswith("user_") and len(key) > 5}


def mechanisms(text: str) -> tuple[str, ...]:
    """A comma-separated mechanism list, upper case, each one klog serves."""
    names = tuple(dict.fromkeys(m.strip().upper() for m in text.split(",") if m.strip()))
    if not names:
        raise ValueError("expected a comma-separated list of SASL mechanisms")
    unsupported = [m for m in names if m not in SUPPORTED_MECHANISMS]
    if unsupported:
        raise ValueError(f"{', '.join(unsupported)} not supported; klog serves "
                         f"{', '.join(SUPPORTED_MECHANISMS)}")
    return names


def split_listener_key(key: str) -> tuple[str, str]:
    """``listener.name.<listener>.<suffix>`` as (LISTENER, suffix). Raises ValueError."""
    listener, dot, suffix = key[len(LISTENER_PREFIX):].partition(".")
    if not listener or not dot or not suffix:
        raise ValueError("expected listener.name.<listener>.<key>")
    return listener.upper(), suffix


def check_suffix(key: str, suffix: str, source: str) -> None:
    """Refuse a ``listener.name.*`` key whose suffix klog does not know, naming it."""
    if suffix == "sasl.enabled.mechanisms" or IGNORED_LISTENER_SUFFIX.match(suffix):
        return
    if not (suffix.endswith(JAAS_SUFFIX) and suffix[:-len(JAAS_SUFFIX)].upper() in LOGIN_MODULES):
        raise ValueError(f"{source}: unknown key {key!r}")


def listener_settings(listener: str, settings: dict[str, str], *,
                      default_mechanisms: str | None,
                      source: str) -> tuple[SaslSettings, list[str]]:
    """The SASL settings of ``listener`` from its ``listener.name.*`` keys (``settings``:
    suffix -> value, this listener's only) and the global ``sasl.enabled.mechanisms``
    (None when not set). Returns them with the keys read but not used. Raises ValueError
    naming the key."""
    prefix = f"{LISTENER_PREFIX}{listener.lower()}."
    ignored = []
    text = settings.get("sasl.enabled.mechanisms", default_mechanisms)
    if text is None:
        raise ValueError(f"{source}: listener {listener} is SASL: set sasl.enabled.mechanisms "
                         f"(Kafka's default, GSSAPI, is not served; klog serves "
                         f"{', '.join(SUPPORTED_MECHANISMS)})")
    key = (prefix + "sasl.enabled.mechanisms" if "sasl.enabled.mechanisms" in settings
           else "sasl.enabled.mechanisms")
    try:
        enabled = mechanisms(text)
    except ValueError as exc:
        raise ValueError(f"{source}: bad value for {key!r}: {exc}") from None
    users: dict[str, str] = {}
    for suffix, value in settings.items():
        if suffix == "sasl.enabled.mechanisms":
            continue
        if IGNORED_LISTENER_SUFFIX.match(suffix):
            ignored.append(prefix + suffix)
            continue
        check_suffix(prefix + suffix, suffix, source)
        mechanism = suffix[:-len(JAAS_SUFFIX)].upper()
        entry = _one_entry(prefix + suffix, value, mechanism, source)
        if mechanism == "PLAIN":
            users = plain_users(entry)
        else:
            ignored.append(prefix + suffix)  # the broker's own client side: unused alone
    if "PLAIN" in enabled and not users:
        raise ValueError(f"{source}: PLAIN is enabled on listener {listener}: set "
                         f"{prefix}plain.sasl.jaas.config with user_<name>=\"<password>\" "
                         f"entries")
    return SaslSettings(enabled, users), ignored


def _one_entry(key: str, value: str, mechanism: str, source: str) -> JaasEntry:
    try:
        entries = parse_jaas(value)
    except ValueError as exc:
        raise ValueError(f"{source}: bad value for {key!r}: {exc}") from None
    if len(entries) != 1:
        raise ValueError(f"{source}: bad value for {key!r}: JAAS config property contains "
                         f"{len(entries)} login modules, should be 1 module")
    if entries[0].login_module != LOGIN_MODULES[mechanism]:
        raise ValueError(f"{source}: bad value for {key!r}: {mechanism} needs "
                         f"{LOGIN_MODULES[mechanism]}, not {entries[0].login_module}")
    return entries[0]
