"""DescribeConfigs v0-3: a topic's effective configs (its overrides over the broker defaults)
and a broker's main settings and dynamic keys, so admin tools can read back what CreateTopics
and AlterConfigs set. Each value says its source as Kafka does (a topic override 1, this
node's dynamic config 2, the brokers' dynamic default 3, the static file 4, the built-in
default 5), with the synonyms behind it when asked (v1+).

Authorization as Kafka's: DESCRIBE_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED), on the
cluster for a broker or a broker's loggers (CLUSTER_AUTHORIZATION_FAILED); loggers are not
served (INVALID_REQUEST) once that check has passed."""

from __future__ import annotations

import math

from appliance import dynamic_broker
from appliance.config import KEYS, BrokerConfig
from appliance.control.topics import topic_log_config
from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import describe_configs
from klog.protocol.error_codes import ErrorCode

API_KEY = describe_configs.SPEC.key
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
# Kafka's ConfigSource: where the value in force comes from
SOURCE_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT = 1, 2, 3
SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 4, 5
TYPE_STRING = 2
_BUILT_IN = BrokerConfig()
# a broker key's field: "log.retention.ms" -> ("log", "retention_ms")
_FIELD = {key: (("log", KEYS[key][0][4:]) if KEYS[key][0].startswith("log.")
                else ("broker", KEYS[key][0]))
          for key in dynamic_broker.DYNAMIC_KEYS - dynamic_broker.THROTTLE_KEYS}
_SHOWN_BROKER_KEYS = sorted(set(_FIELD) - {"log.retention.minutes", "log.retention.hours",
                                           "log.roll.hours"})
# a topic key -> the broker keys that set its default ("retention.ms" -> log.retention.*)
_TOPIC_DEFAULT_KEYS: dict[str, list[str]] = {}
for _key, (_kind, _field) in _FIELD.items():
    if _kind == "log":
        _TOPIC_DEFAULT_KEYS.setdefault(_field.replace("_", "."), []).append(_key)


def _entry(name, value, source, read_only=False, synonyms=()):
    return describe_configs.DescribeConfigsResourceResult(
        name=name, value=value, read_only=read_only, is_default=source == SOURCE_DEFAULT,
        config_source=source, is_sensitive=False, synonyms=list(synonyms),
        config_type=TYPE_STRING, documentation=None)


def _synonym(name, value, source):
    return describe_configs.DescribeConfigsSynonym(name=name, value=value, source=source)


def _text(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and math.isinf(value):
        return "1.7976931348623157E308"  # Kafka's Double.MAX_VALUE: no limit
    return str(value)


def _value(config: BrokerConfig, key: str):
    kind, field = _FIELD[key]
    return getattr(config.log_defaults if kind == "log" else config, field)


def _layers(worker):
    """(node layer, default layer) of this node's dynamic broker configs."""
    default, own = dynamic_broker.node_layers(worker.control.dynamic_configs, worker.node_id)
    return own, default


def _broker_source(worker, keys) -> tuple[int, list]:
    """Where the value of a broker key (or of any of its synonyms `keys`) comes from, and
    the synonyms in Kafka's order (the one in force first)."""
    own, default = _layers(worker)
    static = worker.dynamic.static
    synonyms = []
    for layer, source in ((own, SOURCE_DYNAMIC_BROKER), (default, SOURCE_DYNAMIC_DEFAULT)):
        synonyms += [_synonym(k, layer[k], source) for k in keys if k in layer]
    shown = keys[0]
    if _value(static, shown) != _value(_BUILT_IN, shown):
        synonyms.append(_synonym(shown, _text(_value(static, shown)), SOURCE_STATIC_BROKER))
    synonyms.append(_synonym(shown, _text(_value(_BUILT_IN, shown)), SOURCE_DEFAULT))
    return synonyms[0].source, synonyms


def _topic_configs(worker, name, include_synonyms=False):
    info = worker.control.topic(name)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist", []
    effective = topic_log_config(worker.control.defaults, info.configs).to_kafka()
    entries = []
    for key, value in sorted(effective.items()):
        synonyms = []
        broker_keys = sorted(_TOPIC_DEFAULT_KEYS.get(key, []), key=len)
        if broker_keys:
            source, synonyms = _broker_source(worker, broker_keys)
        else:
            source = SOURCE_DEFAULT
        if key in info.configs:
            source = SOURCE_TOPIC
            synonyms.insert(0, _synonym(key, info.configs[key], SOURCE_TOPIC))
        entries.append(_entry(key, value, source,
                              synonyms=synonyms if include_synonyms else ()))
    # overrides that are not the log's (replication throttles, compression.type=producer)
    entries += [_entry(key, value, SOURCE_TOPIC) for key, value in sorted(info.configs.items())
                if key not in effective]
    return ErrorCode.NONE, None, sorted(entries, key=lambda e: e.name)


def _broker_configs(worker, name, include_synonyms=False):
    if name not in ("", str(worker.node_id), str(worker.config.broker_id)):
        return ErrorCode.INVALID_REQUEST, f"unknown broker {name!r}", []
    config = worker.config
    dynamic = []
    for key in _SHOWN_BROKER_KEYS:
        synonyms_of = [key] + [k for k in _FIELD if k != key and _FIELD[k] == _FIELD[key]]
        source, synonyms = _broker_source(worker, synonyms_of)
        dynamic.append(_entry(key, _text(_value(config, key)), source,
                              synonyms=synonyms if include_synonyms else ()))
    own, default = _layers(worker)
    for key in sorted(dynamic_broker.THROTTLE_KEYS & (own.keys() | default.keys())):
        source = SOURCE_DYNAMIC_BROKER if key in own else SOURCE_DYNAMIC_DEFAULT
        dynamic.append(_entry(key, own.get(key, default.get(key)), source))
    values = {
        "broker.id": str(config.broker_id),
        "listeners": ",".join(map(str, config.listeners)),
        "advertised.listeners": ",".join(map(str, config.advertised_endpoints)),
        "log.dirs": ",".join(str(p) for p in config.log_dirs),
        "num.partitions": str(config.num_partitions),
        "auto.create.topics.enable": str(config.auto_create_topics_enable).lower(),
        "socket.request.max.bytes": str(config.socket_request_max_bytes),
    }
    return ErrorCode.NONE, None, sorted(
        [_entry(k, v, SOURCE_STATIC_BROKER, read_only=True) for k, v in values.items()]
        + dynamic, key=lambda e: e.name)


def handle(worker: HandlerContext, request):
    results = []
    for resource in request.body.resources:
        if resource.resource_type == TOPIC and not access.on_topic(
                worker, request, Operation.DESCRIBE_CONFIGS, resource.resource_name):
            error, message, configs = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, []
        elif resource.resource_type in (BROKER, BROKER_LOGGER) and not access.on_cluster(
                worker, request, Operation.DESCRIBE_CONFIGS):
            error, message, configs = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, []
        elif resource.resource_type == TOPIC:
            error, message, configs = _topic_configs(worker, resource.resource_name,
                                                     request.body.include_synonyms)
        elif resource.resource_type == BROKER:
            error, message, configs = _broker_configs(worker, resource.resource_name,
                                                      request.body.include_synonyms)
        else:
            error, message, configs = (ErrorCode.INVALID_REQUEST,
                                       f"resource type {resource.resource_type} is not served",
                                       [])
        wanted = resource.configuration_keys
        if wanted is not None:
            configs = [c for c in configs if c.name in wanted]
        results.append(describe_configs.DescribeConfigsResult(
            error_code=int(error), error_message=message, resource_type=resource.resource_type,
            resource_name=resource.resource_name, configs=configs))
    return describe_configs.Response(throttle_time_ms=0, results=results)
