"""Client configuration: one frozen dataclass per client, Kafka's key names in snake_case.

``linger.ms`` is ``linger_ms``, ``compression.type`` is ``compression_type``, and so on, so a
Kafka user's habits carry over. :func:`build` turns a constructor's keyword options into a
config: an unknown option is a ``TypeError`` naming it (with the nearest known name), a bad
value a ``ValueError`` naming the option. Values are normalized on the way in (``acks="all"``
becomes -1; ``compression_type=None`` becomes ``"none"``; a list of bootstrap servers becomes
one comma-separated string). Pure: no I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from klog.security import ClientSecurity

__all__ = ["ConsumerConfig", "ProducerConfig", "build", "parse_bootstrap"]

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}
OFFSET_RESETS = ("earliest", "latest", "none")
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")  # klog.consumer.assignors' names
INT32_MAX = 2**31 - 1


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """'host:port[,host:port]' into pairs, with a clear error for anything else."""
    pairs = []
    for item in servers.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item.strip()!r} is not host:port")
        pairs.append((host.strip("[]"), int(port)))
    return pairs


def _check(condition: bool, name: str, value: Any, expected: str) -> None:
    if not condition:
        raise ValueError(f"{name}={value!r}: expected {expected}")


def _int_at_least(config: Any, name: str, low: int, high: int = INT32_MAX) -> None:
    value = getattr(config, name)
    _check(type(value) is int and low <= value <= high, name, value,
           f"an integer in [{low}, {high}]")


def _callable_or_none(config: Any, name: str) -> None:
    value = getattr(config, name)
    _check(value is None or callable(value), name, value, "a callable or None")


@dataclass(frozen=True, kw_only=True)
class _Common:
    bootstrap_servers: str
    client_id: str
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    metadata_max_age_ms: int = 300_000
    # authentication and TLS (klog/security.py, klog/tls.py), kafka-python's names
    security_protocol: str = "PLAINTEXT"  # SSL, SASL_PLAINTEXT, SASL_SSL
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True

    @property
    def security(self) -> ClientSecurity:
        return ClientSecurity(self.security_protocol, self.sasl_mechanism,
                              self.sasl_plain_username, self.sasl_plain_password)

    def _validate_common(self) -> None:
        self.security  # noqa: B018 (validates the security options, raising ValueError)
        _check(isinstance(self.bootstrap_servers, str) and self.bootstrap_servers != "",
               "bootstrap_servers", self.bootstrap_servers, "'host:port[,host:port]'")
        try:
            parse_bootstrap(self.bootstrap_servers)
        except ValueError as exc:
            raise ValueError(f"bootstrap_servers: {exc}") from None
        _check(isinstance(self.client_id, str), "client_id", self.client_id, "a string")
        for name in ("request_timeout_ms", "retry_backoff_ms", "metadata_max_age_ms"):
            _int_at_least(self, name, 1 if name == "request_timeout_ms" else 0)
        self._validate_tls()

    def _validate_tls(self) -> None:
        # security_protocol itself: ClientSecurity's check (klog/security.py)
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password"):
            value = getattr(self, name)
            _check(value is None or isinstance(value, str), name, value, "a string or None")
        _check(isinstance(self.ssl_check_hostname, bool), "ssl_check_hostname",
               self.ssl_check_hostname, "True or False")


@dataclass(frozen=True, kw_only=True)
class ProducerConfig(_Common):
    """Options of `klog.Producer` (Kafka's producer configs; defaults are the Java client's,
    except ``batch_size``: librdkafka's 1,000,000 bytes, not Java's 16,384).

    Why (issue 14, measured): with idempotence a partition has at most five batches in
    flight, and acks=all answers a batch only once it is on disk, so one partition moves at
    most five batches per round trip (an fdatasync and two hops). At 16 KiB that is 375
    records of 200 bytes per round trip: 0.09-0.57x librdkafka at its defaults on one
    partition (median 0.17 of 18 rounds), whatever the per-request costs (cutting the
    worker's by a third moved it from 0.14). At 1 MB the same round trips carry 60 times
    more: 0.61-1.68x (median 0.76 of 16 rounds). A batch is only an upper bound here
    (nothing is preallocated, ``linger_ms`` still sends small batches early); what it changes
    is the largest batch a broker receives, so a topic whose ``max.message.bytes`` is below it
    refuses full batches (MessageSizeTooLargeError, as librdkafka's): set ``batch_size`` below
    that limit for such topics."""

    client_id: str = "klog-producer"
    acks: int = -1  # 0, 1, or -1 ("all")
    compression_type: str = "none"  # none, gzip, snappy, lz4, zstd
    linger_ms: int = 5
    batch_size: int = 1_000_000  # librdkafka's default; see the class docstring
    enable_idempotence: bool = True
    retries: int = INT32_MAX
    buffer_memory: int = 32 * 1024 * 1024
    max_block_ms: int = 60_000
    delivery_timeout_ms: int = 120_000
    max_in_flight_requests_per_connection: int = 5
    max_request_size: int = 1_048_576
    key_serializer: Callable[[Any], bytes] | None = None
    value_serializer: Callable[[Any], bytes] | None = None
    transactional_id: str | None = None  # set: a transactional producer (KIP-98)
    transaction_timeout_ms: int = 60_000  # the coordinator aborts a transaction open longer

    def __post_init__(self) -> None:
        self._validate_common()
        _check(self.transactional_id is None or isinstance(self.transactional_id, str)
               and self.transactional_id != "", "transactional_id", self.transactional_id,
               "a non-empty string or None")
        _int_at_least(self, "transaction_timeout_ms", 1)
        if self.transactional_id is not None:
            _check(self.enable_idempotence, "enable_idempotence", self.enable_idempotence,
                   "True (or unset) with a transactional_id: transactions need idempotence")
        _check(self.acks in (-1, 0, 1), "acks", self.acks, "0, 1, -1 or 'all'")
        _check(self.compression_type in CODECS, "compression_type", self.compression_type,
               "one of " + ", ".join(CODECS))
        _int_at_least(self, "buffer_memory", 1, 2**63 - 1)  # a long in Kafka
        for name, low in (("linger_ms", 0), ("batch_size", 1), ("retries", 0),
                          ("max_block_ms", 0),
                          ("delivery_timeout_ms", 1),
                          ("max_in_flight_requests_per_connection", 1),
                          ("max_request_size", 1)):
            _int_at_least(self, name, low)
        _check(isinstance(self.enable_idempotence, bool), "enable_idempotence",
               self.enable_idempotence, "True or False")
        if self.enable_idempotence:
            _check(self.acks == -1, "acks", self.acks, "'all' when enable_idempotence=True")
            _check(self.retries > 0, "retries", self.retries,
                   "> 0 when enable_idempotence=True")
            _check(self.max_in_flight_requests_per_connection <= 5,
                   "max_in_flight_requests_per_connection",
                   self.max_in_flight_requests_per_connection,
                   "at most 5 when enable_idempotence=True")
        _callable_or_none(self, "key_serializer")
        _callable_or_none(self, "value_serializer")

    @property
    def codec(self) -> int:
        return CODECS[self.compression_type]

    @classmethod
    def normalize(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Kafka's spellings into ours; idempotence off when other options rule it out and
        it was not asked for explicitly (the Java client's rule)."""
        if "acks" in options and isinstance(options["acks"], str):
            options["acks"] = ACKS.get(options["acks"].lower(), options["acks"])
        if "compression_type" in options:
            codec = options["compression_type"]
            options["compression_type"] = "none" if codec is None else str(codec).lower()
        if "enable_idempotence" not in options and options.get("transactional_id"):
            options["enable_idempotence"] = True  # Kafka's rule: forced on, so acks=all
        if "enable_idempotence" not in options:
            options["enable_idempotence"] = (
                options.get("acks", -1) == -1 and options.get("retries", 1) != 0
                and options.get("max_in_flight_requests_per_connection", 5) <= 5)
        return options


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig(_Common):
    """Options of `klog.Consumer` (Kafka's consumer configs; group defaults are the Java
    client's, the assignor list librdkafka's). ``group_id`` names the group used by
    ``subscribe`` and by commits; without one the consumer can only ``assign``."""

    client_id: str = "klog-consumer"
    group_id: str | None = None
    group_instance_id: str | None = None  # static membership (KIP-345)
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000  # also the rebalance timeout sent in JoinGroup
    partition_assignment_strategy: tuple[str, ...] = ("range", "roundrobin")
    enable_auto_commit: bool = True  # only with a group_id
    auto_commit_interval_ms: int = 5_000
    exclude_internal_topics: bool = True  # a pattern never matches __consumer_offsets
    auto_offset_reset: str = "latest"  # earliest, latest, none
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    isolation_level: str = "read_uncommitted"
    max_poll_records: int = 500
    check_crcs: bool = True
    consumer_timeout_ms: int | None = None  # iteration ends after this long idle; None: never
    key_deserializer: Callable[[bytes], Any] | None = None
    value_deserializer: Callable[[bytes], Any] | None = None

    def __post_init__(self) -> None:
        self._validate_common()
        for name in ("group_id", "group_instance_id"):
            value = getattr(self, name)
            _check(value is None or (isinstance(value, str) and value != ""), name, value,
                   "a non-empty string or None")
        _check(self.group_instance_id is None or self.group_id is not None,
               "group_instance_id", self.group_instance_id, "None without a group_id")
        _check(self.auto_offset_reset in OFFSET_RESETS, "auto_offset_reset",
               self.auto_offset_reset, "one of " + ", ".join(OFFSET_RESETS))
        _check(self.isolation_level in ISOLATION_LEVELS, "isolation_level",
               self.isolation_level, "read_uncommitted or read_committed")
        for name, low in (("fetch_min_bytes", 0), ("fetch_max_wait_ms", 0),
                          ("fetch_max_bytes", 1), ("max_partition_fetch_bytes", 1),
                          ("max_poll_records", 1), ("session_timeout_ms", 1),
                          ("heartbeat_interval_ms", 1), ("max_poll_interval_ms", 1),
                          ("auto_commit_interval_ms", 0)):
            _int_at_least(self, name, low)
        _check(self.heartbeat_interval_ms < self.session_timeout_ms, "heartbeat_interval_ms",
               self.heartbeat_interval_ms, "less than session_timeout_ms")
        strategy = self.partition_assignment_strategy
        _check(len(strategy) > 0 and all(name in ASSIGNORS for name in strategy)
               and len(set(strategy)) == len(strategy), "partition_assignment_strategy",
               strategy, "a list of distinct names out of " + ", ".join(ASSIGNORS))
        for name in ("check_crcs", "enable_auto_commit", "exclude_internal_topics"):
            _check(isinstance(getattr(self, name), bool), name, getattr(self, name),
                   "True or False")
        _check(self.consumer_timeout_ms is None
               or (type(self.consumer_timeout_ms) is int and self.consumer_timeout_ms >= 0),
               "consumer_timeout_ms", self.consumer_timeout_ms, "None or an integer >= 0")
        _callable_or_none(self, "key_deserializer")
        _callable_or_none(self, "value_deserializer")

    @property
    def isolation(self) -> int:
        return ISOLATION_LEVELS[self.isolation_level]

    @property
    def auto_commit(self) -> bool:
        """Auto-commit is on: enabled, and there is a group to commit to."""
        return self.enable_auto_commit and self.group_id is not None

    @classmethod
    def normalize(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Lower-case enum spellings; the assignor list from a list or librdkafka's
        comma-separated string (``"range,roundrobin"``) into a tuple."""
        for name in ("auto_offset_reset", "isolation_level"):
            if isinstance(options.get(name), str):
                options[name] = options[name].lower()
        strategy = options.get("partition_assignment_strategy")
        if isinstance(strategy, str):
            options["partition_assignment_strategy"] = tuple(
                s.strip() for s in strategy.split(",") if s.strip())
        elif isinstance(strategy, list | tuple):
            options["partition_assignment_strategy"] = tuple(strategy)
        return options


def build(cls: Any, owner: str, options: dict[str, Any]) -> Any:
    """``cls(**options)`` for ``owner`` ("Producer", ...), with errors that name the option."""
    known = {f.name for f in fields(cls)}
    for name in options:
        if name not in known:
            near = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise TypeError(f"{owner} got an unknown option {name!r}{hint}")
    if "bootstrap_servers" not in options:
        raise TypeError(f"{owner} needs bootstrap_servers='host:port[,host:port]'")
    servers = options["bootstrap_servers"]
    if isinstance(servers, (list, tuple)):
        options["bootstrap_servers"] = ",".join(str(s) for s in servers)
    options = dict(options)
    if isinstance(options.get("security_protocol"), str):
        options["security_protocol"] = options["security_protocol"].upper()
    return cls(**cls.normalize(options))
