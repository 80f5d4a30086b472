"""The ``klog`` data source's options, parsed once into a frozen value. Pure.

Names and meanings follow Spark's Kafka source so a query can switch formats unchanged:

- what to read, exactly one of ``subscribe`` (comma list), ``subscribePattern`` (a regex that
  must match the whole topic name, as Java's ``matches``) or ``assign`` (JSON
  ``{"clicks": [0, 1]}``);
- ``bootstrap.servers`` or ``kafka.bootstrap.servers`` (required);
- where to start: ``startingTimestamp`` (ms, one for every partition) wins over
  ``startingOffsetsByTimestamp`` (JSON ``{"clicks": {"0": ms}}``), which wins over
  ``startingOffsets`` (``earliest``, ``latest``, or JSON ``{"clicks": {"0": 23, "1": -2}}``
  with -2 = earliest, -1 = latest). Defaults: earliest for batch, latest for streaming;
- where to end (batch only): ``endingTimestamp`` / ``endingOffsetsByTimestamp`` /
  ``endingOffsets`` (default ``latest``; -2 is not allowed);
- ``startingOffsetsByTimestampStrategy``: ``error`` (default, as Spark) or ``latest`` when no
  record is at or after a starting timestamp; an ending timestamp without a match means latest;
- ``minPartitions``, ``maxOffsetsPerTrigger`` (streaming), ``failOnDataLoss`` (default true),
  ``includeHeaders`` (default false), ``kafkaConsumer.pollTimeoutMs`` (default 120000);
- ``kafka.<key>``: passed to ``klog.Consumer`` as ``<key>`` with dots as underscores
  (``kafka.max.partition.fetch.bytes=8388608``); an unknown key fails as the client does;
- security, klog's client's (kafka-python's) names, given as they are (``security_protocol``,
  ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``, ``ssl_password``, ``ssl_check_hostname``,
  ``sasl_mechanism``, ``sasl_plain_username``, ``sasl_plain_password``) or with dots after
  ``kafka.`` (``kafka.security.protocol``, ``kafka.sasl.plain.username``): kept as text (a
  password of digits stays a string) and passed to every client the source opens, the lookups'
  ``klog.Admin`` included.

Every mistake is a ValueError that names the option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

EARLIEST, LATEST = -2, -1
DEFAULT_POLL_TIMEOUT_MS = 120_000

# consumer settings the source picks unless the user passes kafka.* ones: bigger fetches than
# the client's defaults, since a Spark task reads one partition straight through
DEFAULT_CONSUMER = (("max_partition_fetch_bytes", 4 * 1024 * 1024), ("fetch_max_wait_ms", 100))

TopicPartitionKey = tuple[str, int]

# klog.Consumer's and klog.Admin's security options (klog/security.py, klog/tls.py)
SECURITY_OPTIONS = ("security_protocol", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
                    "ssl_password", "ssl_check_hostname", "sasl_mechanism",
                    "sasl_plain_username", "sasl_plain_password")


@dataclass(frozen=True)
class Subscription:
    """What to read: ``kind`` is "subscribe", "pattern" or "assign"."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[TopicPartitionKey, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "pattern":
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics or any(t == topic for t, _ in self.assigned)


@dataclass(frozen=True)
class Bound:
    """One end of the ranges to read. ``kind``: "earliest", "latest", "offsets" (``offsets``
    per partition, which may hold -2/-1), "timestamp" (one ``timestamp`` for every
    partition) or "timestamps" (``offsets`` holds a timestamp per partition)."""

    kind: str
    timestamp: int = 0
    offsets: tuple[tuple[TopicPartitionKey, int], ...] = ()

    def as_dict(self) -> dict[TopicPartitionKey, int]:
        return dict(self.offsets)


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: Bound
    ending: Bound
    timestamp_strategy: str = "error"
    min_partitions: int = 0
    max_offsets_per_trigger: int = 0
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    consumer: tuple[tuple[str, object], ...] = field(default=DEFAULT_CONSUMER)
    security: tuple[tuple[str, object], ...] = field(default=(), repr=False)  # secrets inside

    def consumer_options(self) -> dict[str, object]:
        return {**dict(self.consumer), **dict(self.security)}

    def security_options(self) -> dict[str, object]:
        """For the clients other than the consumer (the lookups' Admin)."""
        return dict(self.security)


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Parse Spark's option map (any key case); ValueError names the bad option."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    bootstrap = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise ValueError("option 'bootstrap.servers' (or 'kafka.bootstrap.servers') is required")
    starting = _starting(opts, streaming)
    ending = _ending(opts, streaming)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise ValueError(f"startingOffsetsByTimestampStrategy must be error or latest, "
                         f"not {strategy!r}")
    return SourceOptions(
        bootstrap_servers=bootstrap,
        subscription=_subscription(opts),
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        min_partitions=_positive(opts, "minpartitions", "minPartitions"),
        max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        fail_on_data_loss=_flag(opts, "failondataloss", "failOnDataLoss", True),
        include_headers=_flag(opts, "includeheaders", "includeHeaders", False),
        poll_timeout_ms=_positive(opts, "kafkaconsumer.polltimeoutms",
                                  "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS,
        consumer=tuple({**dict(DEFAULT_CONSUMER), **_passthrough(opts)}.items()),
        security=_security(options),
    )


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(given) != 1:
        raise ValueError("exactly one of the options 'subscribe', 'subscribePattern' and "
                         f"'assign' is required (got {len(given)})")
    kind = given[0]
    value = opts[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ValueError("option 'subscribe' names no topic")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"option 'subscribePattern' is not a regex: {exc}") from None
        return Subscription("pattern", pattern=value)
    parsed = _json(value, "assign")
    if not isinstance(parsed, dict) or not all(isinstance(v, list) for v in parsed.values()):
        raise ValueError('option \'assign\' must be JSON like {"clicks": [0, 1]}')
    assigned = tuple(sorted((str(t), int(p)) for t, parts in parsed.items() for p in parts))
    return Subscription("assign", assigned=assigned)


def _starting(opts: dict[str, str], streaming: bool) -> Bound:
    bound = _timestamp_bound(opts, "starting")
    if bound is not None:
        return bound
    text = opts.get("startingoffsets", "latest" if streaming else "earliest")
    bound = _offsets_bound(text, "startingOffsets")
    if not streaming and (bound.kind == "latest" or LATEST in bound.as_dict().values()):
        raise ValueError("startingOffsets: latest is not allowed in a batch query")
    return bound


def _ending(opts: dict[str, str], streaming: bool) -> Bound:
    names = ("endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets")
    if streaming:
        if any(n in opts for n in names):
            raise ValueError("endingOffsets/endingTimestamp are for batch queries only")
        return Bound("latest")
    bound = _timestamp_bound(opts, "ending")
    if bound is not None:
        return bound
    bound = _offsets_bound(opts.get("endingoffsets", "latest"), "endingOffsets")
    if bound.kind == "earliest" or EARLIEST in bound.as_dict().values():
        raise ValueError("endingOffsets: earliest (-2) is not allowed")
    return bound


def _timestamp_bound(opts: dict[str, str], side: str) -> Bound | None:
    single = opts.get(f"{side}timestamp")
    if single is not None:
        return Bound("timestamp", timestamp=_int(single, f"{side}Timestamp", low=0))
    per_partition = opts.get(f"{side}offsetsbytimestamp")
    if per_partition is not None:
        name = f"{side}OffsetsByTimestamp"
        return Bound("timestamps", offsets=_partition_map(per_partition, name, low=0))
    return None


def _offsets_bound(text: str, name: str) -> Bound:
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return Bound(word)
    return Bound("offsets", offsets=_partition_map(text, name, low=EARLIEST))


def _partition_map(text: str, name: str, *, low: int) -> tuple[tuple[TopicPartitionKey, int], ...]:
    parsed = _json(text, name)
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise ValueError(f'option {name!r} must be earliest, latest or JSON like '
                         f'{{"clicks": {{"0": 23}}}}, not {text!r}')
    out = []
    for topic, parts in parsed.items():
        for part, value in parts.items():
            try:
                key = (str(topic), int(part))
            except ValueError:
                raise ValueError(f"option {name!r}: partition {part!r} is not a number") from None
            out.append((key, _int(value, name, low=low)))
    return tuple(sorted(out))


def _json(text: str, name: str):
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"option {name!r} is not valid JSON: {exc}") from None


def _int(value, name: str, *, low: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"option {name!r}: {value!r} is not an integer") from None
    if number < low or isinstance(value, bool):
        raise ValueError(f"option {name!r}: {value!r} is out of range")
    return number


def _positive(opts: dict[str, str], key: str, name: str) -> int:
    if key not in opts:
        return 0
    return _int(opts[key], name, low=1)


def _flag(opts: dict[str, str], key: str, name: str, default: bool) -> bool:
    value = opts.get(key)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise ValueError(f"option {name!r} must be true or false, not {value!r}")
    return value.lower() == "true"


def _passthrough(opts: dict[str, str]) -> dict[str, object]:
    """``kafka.max.partition.fetch.bytes=…`` → ``{"max_partition_fetch_bytes": …}`` (the
    security ones apart: `_security`)."""
    out: dict[str, object] = {}
    for key, value in opts.items():
        if key.startswith("kafka.") and key != "kafka.bootstrap.servers":
            name = key[len("kafka."):].replace(".", "_")
            if name not in SECURITY_OPTIONS:
                out[name] = _typed(value)
    return out


def _security(options: Mapping[str, str]) -> tuple[tuple[str, object], ...]:
    """The security options, by either spelling (the module docstring); the values exactly
    as given (Spark lowercases no value), ``ssl_check_hostname`` as a flag."""
    given: dict[str, str] = {}
    for key, value in options.items():
        low = str(key).lower()
        name = low[len("kafka."):].replace(".", "_") if low.startswith("kafka.") else low
        if name in SECURITY_OPTIONS:
            if name in given and given[name] != str(value):
                raise ValueError(f"option {name!r} is given twice with different values")
            given[name] = str(value)
    out: dict[str, object] = dict(given)
    if "ssl_check_hostname" in given:
        out["ssl_check_hostname"] = _flag(given, "ssl_check_hostname", "ssl_check_hostname",
                                          True)
    return tuple(sorted(out.items()))


def _typed(value: str) -> object:
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value
