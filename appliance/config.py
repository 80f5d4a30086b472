"""The appliance's configuration: Kafka's `server.properties` keys, typed and frozen.

Each supported key is one row of `KEYS`: Kafka's dotted name, the field of `BrokerConfig` it
sets, and a parser that raises `ValueError` with a reason. An unknown key, or a value that does
not parse, stops start-up with a message naming the key, because a silently ignored setting is
how operators lose data. Keys that Kafka has but that mean nothing for klog (thread pools, JVM
tuning) are accepted and listed in `BrokerConfig.ignored_keys`, so an operator's Kafka file
still loads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from appliance.config_error import ConfigError
from appliance.inter_broker import InterBrokerSasl, parse_mechanism
from appliance.listener_security import (
    DEFAULT_PROTOCOL_MAP,
    SECURITY_PROTOCOLS,
    parse_protocol_map,
    resolve_listener_ssl,
    resolve_protocols,
    resolve_sasl,
)
from appliance.listeners import Listener, parse_listeners
from appliance.properties import parse_override, parse_properties
from appliance.sasl_config import LISTENER_PREFIX, SaslSettings
from appliance.security.authorizer import (
    AUTHORIZER_CLASSES,
    AuthorizerSettings,
    parse_super_users,
)
from appliance.segments.config import CLEANUP_POLICIES, LogConfig
from appliance.tls.settings import SSL_IGNORED, SSL_KEYS, split_listener_ssl

DEFAULT_PORT = 9092


@dataclass(frozen=True, kw_only=True)
class BrokerConfig:
    """What one appliance needs to start; field names are Kafka's keys in snake_case."""

    broker_id: int = 0
    # every listener is served by every worker (port + worker index); appliance/listeners.py
    listeners: tuple[Listener, ...] = (Listener("127.0.0.1", DEFAULT_PORT),)
    advertised_listeners: tuple[Listener, ...] | None = None
    # the inter-broker listener: the keys as written, and the name they resolve to
    inter_broker_listener_name: str | None = None
    security_inter_broker_protocol: str | None = None
    inter_broker_name: str = "PLAINTEXT"
    # the replica fetchers' own credentials when the inter-broker listener is SASL
    sasl_mechanism_inter_broker_protocol: str | None = None
    inter_broker_sasl: InterBrokerSasl | None = None
    listener_security_protocol_map: dict[str, str] = field(
        default_factory=lambda: dict(DEFAULT_PROTOCOL_MAP))
    log_dirs: tuple[Path, ...] = (Path("/tmp/klog-logs"),)
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    socket_request_max_bytes: int = 100 * 1024 * 1024
    # protecting each worker (a Kafka node) from clients: Kafka's keys and defaults
    connections_max_idle_ms: int = 600_000
    # client quotas' rate windows (Kafka's keys): num samples of size seconds each
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    # Prometheus metrics served by the supervisor on 127.0.0.1 unless metrics.host says
    # otherwise; off without metrics.port
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    log_retention_check_interval_ms: int = 300_000
    # cluster mode (cluster/): without zookeeper.connect the appliance runs alone
    zookeeper_connect: str | None = None
    zookeeper_session_timeout_ms: int = 18_000
    zookeeper_connection_timeout_ms: int = 18_000
    # znodes klog creates carry ACLs (Kafka's zookeeper.set.acl); klog's digest identity
    # `user:password` (Kafka reads it from a JAAS file, klog from this key)
    zookeeper_set_acl: bool = False
    zookeeper_digest_credentials: str | None = field(default=None, repr=False)
    broker_rack: str | None = None
    # a node that left the fleet stays in Metadata's brokers this long
    # (appliance.control.departed_nodes: why librdkafka fails over faster so); 0, as Kafka:
    # dropped at once (a kafka-python group stalled behind its dead coordinator with it: README)
    departed_broker_grace_ms: int = 0
    shutdown_timeout_ms: int = 30_000
    worker_restart_backoff_ms: int = 100
    # sealed segments a worker keeps open (descriptor + index mappings; descriptor_cache.py);
    # 0: half the soft RLIMIT_NOFILE. klog's own key (issue 26)
    log_open_segments_max: int = 0
    worker_restart_backoff_max_ms: int = 30_000
    worker_heartbeat_timeout_ms: int = 30_000
    # replication: a follower that has not caught up for this long leaves the ISR
    replica_lag_time_max_ms: int = 30_000
    # a follower's fetches (workers/replication/fetch_settings.py): Kafka's keys and defaults
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    # leadership (cluster/leadership.py): on SIGTERM, leadership moves away first, waiting at
    # most max.retries x retry.backoff.ms; the controller moves it back to preferred replicas
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    # consumer groups (Kafka's keys; klog's smaller defaults suit one appliance's disks)
    offsets_topic_num_partitions: int = 16
    offsets_topic_segment_bytes: int = 16 * 1024 * 1024
    # cluster mode: copies of each __consumer_offsets partition, on distinct appliances (an
    # appliance alone keeps one), and how long a commit waits for them (Kafka's keys)
    offsets_topic_replication_factor: int = 3
    offsets_commit_timeout_ms: int = 5000
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    # transactions (Kafka's keys and defaults; the topic's factor is capped as the offsets
    # topic's: one copy for an appliance alone)
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 16 * 1024 * 1024
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # KIP-890's first part: a transactional batch that would start a transaction on a
    # partition is appended only once the coordinator confirms the partition is in it
    transaction_partition_verification_enable: bool = True
    # SASL (appliance/sasl_config.py): listener name -> its settings, SASL listeners only
    listener_sasl: dict[str, SaslSettings] = field(default_factory=dict)
    connection_failed_authentication_delay_ms: int = 100
    # ACLs (appliance/security): on when authorizer.class.name names Kafka's authorizer
    authorizer_class_name: str = ""
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    # TLS on an SSL listener (appliance/tls): Kafka's ssl.* keys, PEM stores only
    ssl_keystore_type: str = "PEM"
    ssl_keystore_location: Path | None = None
    ssl_keystore_key: str | None = None
    ssl_keystore_certificate_chain: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_truststore_type: str = "PEM"
    ssl_truststore_location: Path | None = None
    ssl_truststore_certificates: str | None = None
    ssl_client_auth: str = "none"
    ssl_enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    ssl_protocol: str = "TLSv1.3"
    ssl_cipher_suites: tuple[str, ...] = ()
    # listener name -> {ssl_* field: value} from listener.name.<l>.ssl.* (tls_config applies)
    listener_ssl: dict[str, dict[str, object]] = field(default_factory=dict)
    # the log cleaner (appliance/workers/cleaning): Kafka's keys and defaults; "threads" is
    # how many partitions a worker cleans at once (each in its own thread)
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    log_cleaner_io_max_bytes_per_second: float = float("inf")
    log_cleaner_io_buffer_size: int = 512 * 1024
    log_defaults: LogConfig = field(default_factory=LogConfig)
    ignored_keys: tuple[str, ...] = ()

    @property
    def first_listener(self) -> Listener:
        """The first of `listeners` (what klog's tools dial when they are given no address)."""
        return self.listeners[0]

    @property
    def inter_broker_listener(self) -> Listener:
        """The listener other appliances' replica fetchers dial."""
        return self.listener_named(self.inter_broker_name)

    def listener_named(self, name: str) -> Listener:
        return next(listener for listener in self.listeners if listener.name == name)

    @property
    def advertised_endpoints(self) -> tuple[Listener, ...]:
        """Where each listener is reached: its `advertised.listeners` entry, else itself
        (a listener that `advertised.listeners` leaves out keeps its bound address)."""
        given = {a.name: a for a in self.advertised_listeners or ()}
        return tuple(given.get(listener.name, listener) for listener in self.listeners)

    def advertised_for(self, name: str) -> Listener:
        return next(a for a in self.advertised_endpoints if a.name == name)

    @property
    def advertised(self) -> Listener:
        """The inter-broker listener's advertised endpoint (the appliance's fleet address)."""
        return self.advertised_for(self.inter_broker_name)

    def sasl_for(self, listener_name: str) -> SaslSettings | None:
        """A listener's SASL settings, None on a listener without SASL."""
        return self.listener_sasl.get(listener_name)

    @property
    def sasl(self) -> SaslSettings | None:
        """The first SASL listener's settings (an appliance with one listener: its own)."""
        return next(iter(self.listener_sasl.values()), None)

    def tls_config(self, listener_name: str) -> BrokerConfig:
        """This config with a listener's `listener.name.<l>.ssl.*` overrides applied: what
        appliance/tls reads for that listener."""
        overrides = self.listener_ssl.get(listener_name)
        return dataclasses.replace(self, **overrides) if overrides else self

    @property
    def authorizer(self) -> AuthorizerSettings | None:
        """The authorizer's settings, or None when no authorizer is configured (every
        request is allowed, as before ACLs)."""
        if not self.authorizer_class_name:
            return None
        return AuthorizerSettings(self.super_users, self.allow_everyone_if_no_acl_found)


def _int(low: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
        if low is not None and value < low:
            raise ValueError(f"must be >= {low}, got {value}")
        return value

    return parse


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return lowered == "true"


def _paths(text: str) -> tuple[Path, ...]:
    paths = tuple(Path(p.strip()) for p in text.split(",") if p.strip())
    if not paths:
        raise ValueError("expected a comma-separated list of directories")
    if len(set(paths)) != len(paths):
        raise ValueError("the same directory is listed twice")
    return paths


def _advertised(text: str) -> tuple[Listener, ...]:
    return parse_listeners(text, distinct_ports=False)  # Kafka lets them share a port


def _listener_name(text: str) -> str:
    if not text.strip():
        raise ValueError("expected a listener name")
    return text.strip().upper()


def _security_protocol(text: str) -> str:
    protocol = text.strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"{protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
    return protocol


def _zookeeper_connect(text: str) -> str:
    """`host:port[,host:port...][/chroot]`, as Kafka takes it."""
    text = text.strip()
    hosts, slash, chroot = text.partition("/")
    for entry in hosts.split(","):
        host, colon, port = entry.strip().rpartition(":")
        if not host or not colon or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"expected host:port[,host:port...][/chroot], got {text!r}")
    if slash and (not chroot or chroot.startswith("/") or chroot.endswith("/")
                  or "//" in chroot):
        raise ValueError(f"the chroot of {text!r} must be a path like /klog")
    return text


def _hours_to_ms(text: str) -> int:
    return _int(-1)(text) * 3_600_000 if text.strip() != "-1" else -1


def _minutes_to_ms(text: str) -> int:
    return _int(-1)(text) * 60_000 if text.strip() != "-1" else -1


def _percentage(text: str) -> int:
    value = _int(0)(text)
    if value > 100:
        raise ValueError(f"must be a percentage (0-100), got {value}")
    return value


def _port(text: str) -> int:
    value = _int(1)(text)
    if value > 65535:
        raise ValueError(f"must be a TCP port (<= 65535), got {value}")
    return value


def _text(text: str) -> str:
    return text.strip()


def _cleanup_policy(text: str) -> str:
    policies = [p.strip().lower() for p in text.split(",")]
    if any(p not in CLEANUP_POLICIES for p in policies):
        raise ValueError(f"expected a list of {', '.join(CLEANUP_POLICIES)}, got {text!r}")
    return ",".join(policies)


def _ratio(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None
    if not 0 <= value <= 1:
        raise ValueError(f"must be between 0 and 1, got {value}")
    return value


def _rate(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"must be > 0, got {value}")
    return value


def _digest_credentials(text: str) -> str:
    user, colon, password = text.strip().partition(":")
    if not colon or not user or not password:
        raise ValueError("expected user:password (ZooKeeper's digest scheme)")
    return text.strip()


def _authorizer_class(text: str) -> str:
    name = text.strip()
    if name and name not in AUTHORIZER_CLASSES:
        raise ValueError(f"klog's authorizer stands for {' or '.join(sorted(AUTHORIZER_CLASSES))}"
                         f" only, got {name!r}")
    return name


# Kafka key -> (BrokerConfig field, parser). Keys whose field starts with "log." set a field of
# the default LogConfig (topic defaults); `precedence` below orders Kafka's hour/minute/ms trios.
KEYS: dict[str, tuple[str, object]] = {
    "broker.id": ("broker_id", _int(0)),
    "listeners": ("listeners", parse_listeners),
    "advertised.listeners": ("advertised_listeners", _advertised),
    "inter.broker.listener.name": ("inter_broker_listener_name", _listener_name),
    "security.inter.broker.protocol": ("security_inter_broker_protocol", _security_protocol),
    "sasl.mechanism.inter.broker.protocol": ("sasl_mechanism_inter_broker_protocol",
                                             parse_mechanism),
    "listener.security.protocol.map": ("listener_security_protocol_map", parse_protocol_map),
    "log.dirs": ("log_dirs", _paths),
    "log.dir": ("log_dirs", _paths),
    "num.partitions": ("num_partitions", _int(1)),
    "default.replication.factor": ("default_replication_factor", _int(1)),
    "auto.create.topics.enable": ("auto_create_topics_enable", _bool),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int(1024)),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _int(1)),
    "connections.max.idle.ms": ("connections_max_idle_ms", _int(1)),
    "quota.window.num": ("quota_window_num", _int(1)),
    "quota.window.size.seconds": ("quota_window_size_seconds", _int(1)),
    "max.connections": ("max_connections", _int(1)),
    "max.connections.per.ip": ("max_connections_per_ip", _int(1)),
    "metrics.port": ("metrics_port", _port),
    "metrics.host": ("metrics_host", _text),
    "zookeeper.connect": ("zookeeper_connect", _zookeeper_connect),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", _int(1000)),
    "klog.metadata.departed.broker.grace.ms": ("departed_broker_grace_ms", _int(0)),
    "zookeeper.connection.timeout.ms": ("zookeeper_connection_timeout_ms", _int(100)),
    "zookeeper.set.acl": ("zookeeper_set_acl", _bool),
    "zookeeper.digest.credentials": ("zookeeper_digest_credentials", _digest_credentials),
    "broker.rack": ("broker_rack", _text),
    "shutdown.timeout.ms": ("shutdown_timeout_ms", _int(0)),
    "worker.restart.backoff.ms": ("worker_restart_backoff_ms", _int(1)),
    "log.open.segments.max": ("log_open_segments_max", _int(0)),
    "worker.restart.backoff.max.ms": ("worker_restart_backoff_max_ms", _int(1)),
    "worker.heartbeat.timeout.ms": ("worker_heartbeat_timeout_ms", _int(1000)),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", _int(1)),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", _int(64 * 1024)),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", _int(1)),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", _int(1)),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", _int(0)),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", _int(1)),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", _int(1)),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", _int(0)),
    "group.max.size": ("group_max_size", _int(1)),
    "transaction.state.log.num.partitions": ("transaction_state_log_num_partitions", _int(1)),
    "transaction.state.log.replication.factor": ("transaction_state_log_replication_factor",
                                                 _int(1)),
    "transaction.state.log.min.isr": ("transaction_state_log_min_isr", _int(1)),
    "transaction.state.log.segment.bytes": ("transaction_state_log_segment_bytes",
                                            _int(64 * 1024)),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", _int(1)),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "transaction_abort_timed_out_transaction_cleanup_interval_ms", _int(1)),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", _int(1)),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "transaction_remove_expired_transaction_cleanup_interval_ms", _int(1)),
    "transaction.partition.verification.enable": ("transaction_partition_verification_enable",
                                                  _bool),
    "connection.failed.authentication.delay.ms": ("connection_failed_authentication_delay_ms",
                                                  _int(0)),
    "authorizer.class.name": ("authorizer_class_name", _authorizer_class),
    "super.users": ("super_users", parse_super_users),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", _bool),
    "log.segment.bytes": ("log.segment_bytes", _int()),
    "log.roll.ms": ("log.segment_ms", _int()),
    "log.roll.hours": ("log.segment_ms", _hours_to_ms),
    "log.retention.ms": ("log.retention_ms", _int(-1)),
    "log.retention.minutes": ("log.retention_ms", _minutes_to_ms),
    "log.retention.hours": ("log.retention_ms", _hours_to_ms),
    "log.retention.bytes": ("log.retention_bytes", _int(-1)),
    "log.index.interval.bytes": ("log.index_interval_bytes", _int()),
    "log.index.size.max.bytes": ("log.segment_index_bytes", _int()),
    "log.flush.interval.messages": ("log.flush_messages", _int(1)),
    "log.flush.interval.ms": ("log.flush_ms", _int(0)),
    "flush.messages": ("log.flush_messages", _int(1)),
    "flush.ms": ("log.flush_ms", _int(0)),
    "log.message.timestamp.type": ("log.message_timestamp_type", _text),
    "message.max.bytes": ("log.max_message_bytes", _int(0)),
    "file.delete.delay.ms": ("log.file_delete_delay_ms", _int(0)),
    "min.insync.replicas": ("log.min_insync_replicas", _int(1)),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _int(1)),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", _int(0)),
    "replica.fetch.response.max.bytes": ("replica_fetch_response_max_bytes", _int(0)),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", _int(0)),
    "replica.fetch.min.bytes": ("replica_fetch_min_bytes", _int(1)),
    "unclean.leader.election.enable": ("log.unclean_leader_election_enable", _bool),
    "log.cleanup.policy": ("log.cleanup_policy", _cleanup_policy),
    "log.cleaner.min.cleanable.ratio": ("log.min_cleanable_dirty_ratio", _ratio),
    "log.cleaner.delete.retention.ms": ("log.delete_retention_ms", _int(0)),
    "log.cleaner.min.compaction.lag.ms": ("log.min_compaction_lag_ms", _int(0)),
    "log.cleaner.max.compaction.lag.ms": ("log.max_compaction_lag_ms", _int(1)),
    "log.cleaner.enable": ("log_cleaner_enable", _bool),
    "log.cleaner.threads": ("log_cleaner_threads", _int(1)),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", _int(0)),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", _int(1024)),
    "log.cleaner.io.max.bytes.per.second": ("log_cleaner_io_max_bytes_per_second", _rate),
    "log.cleaner.io.buffer.size": ("log_cleaner_io_buffer_size", _int(1024)),
    "controlled.shutdown.enable": ("controlled_shutdown_enable", _bool),
    "controlled.shutdown.max.retries": ("controlled_shutdown_max_retries", _int(0)),
    "controlled.shutdown.retry.backoff.ms": ("controlled_shutdown_retry_backoff_ms", _int(0)),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", _bool),
    "leader.imbalance.check.interval.seconds": ("leader_imbalance_check_interval_seconds",
                                                _int(1)),
    "leader.imbalance.per.broker.percentage": ("leader_imbalance_per_broker_percentage",
                                               _percentage),
}

KEYS.update(SSL_KEYS)

# Kafka lets the finer unit win: log.retention.ms over .minutes over .hours, roll.ms over .hours.
PRECEDENCE = {
    "log.retention.hours": 0, "log.retention.minutes": 1, "log.retention.ms": 2,
    "log.roll.hours": 0, "log.roll.ms": 1,
}

# Kafka keys that configure things klog does not have; accepted so a Kafka file loads as is.
IGNORED = frozenset({
    "num.network.threads", "num.io.threads", "num.replica.fetchers",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "num.recovery.threads.per.data.dir",
    "delete.topic.enable", "log.cleaner.io.buffer.load.factor",
}) | SSL_IGNORED


def build_config(settings: dict[str, str], *, source: str = "configuration") -> BrokerConfig:
    """Turn Kafka-keyed strings into a `BrokerConfig`, or raise `ConfigError` naming the key."""
    broker: dict[str, object] = {}
    log: dict[str, object] = {}
    ignored: list[str] = []
    settings, listener_ssl = split_listener_ssl(settings)
    sasl_keys = {key: settings[key] for key in settings
                 if key.startswith(LISTENER_PREFIX) or key == "sasl.enabled.mechanisms"}
    for key in sorted(settings, key=lambda k: PRECEDENCE.get(k, 0)):
        raw = settings[key]
        if key in sasl_keys:
            continue
        if key in IGNORED:
            ignored.append(key)
            continue
        if key not in KEYS:
            raise ConfigError(f"{source}: unknown key {key!r}")
        target, parse = KEYS[key]
        try:
            value = parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{source}: bad value for {key!r}: {exc}") from None
        if target.startswith("log."):
            log[target[4:]] = value
        else:
            broker[target] = value
    try:
        log_defaults = LogConfig(**log)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    config = resolve_protocols(BrokerConfig(**broker, log_defaults=log_defaults,
                                          ignored_keys=tuple(ignored)), source)
    config = resolve_listener_ssl(config, listener_ssl, source)
    config = resolve_sasl(config, sasl_keys, source)
    _check_zookeeper_acl(config, source)
    if config.group_min_session_timeout_ms > config.group_max_session_timeout_ms:
        raise ConfigError(f"{source}: group.min.session.timeout.ms "
                          f"({config.group_min_session_timeout_ms}) is above "
                          f"group.max.session.timeout.ms ({config.group_max_session_timeout_ms})")
    return config


def _check_zookeeper_acl(config: BrokerConfig, source: str) -> None:
    """zookeeper.set.acl and zookeeper.digest.credentials go together: ACLs without an
    identity would lock klog out of its own znodes, an identity alone protects nothing."""
    if config.zookeeper_set_acl and not config.zookeeper_digest_credentials:
        raise ConfigError(f"{source}: 'zookeeper.set.acl=true' needs "
                          f"'zookeeper.digest.credentials' (user:password): the identity the "
                          f"znodes' ACLs grant")
    if config.zookeeper_digest_credentials and not config.zookeeper_set_acl:
        raise ConfigError(f"{source}: 'zookeeper.digest.credentials' is set without "
                          f"'zookeeper.set.acl=true': set both, or neither")
    if config.zookeeper_set_acl and not config.zookeeper_connect:
        raise ConfigError(f"{source}: 'zookeeper.set.acl' needs 'zookeeper.connect'")


def load_config(path: Path | str | None, overrides: list[str] = ()) -> BrokerConfig:
    """Read a server.properties file (or none: the defaults) and apply `--override` pairs."""
    settings: dict[str, str] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        try:
            settings.update(parse_properties(text, source=source))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    for item in overrides:
        try:
            key, value = parse_override(item)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        settings[key] = value
    return build_config(settings, source=source)


def replace(config: BrokerConfig, **changes) -> BrokerConfig:
    """A copy with some fields changed (tests and the CLI use it)."""
    return dataclasses.replace(config, **changes)
