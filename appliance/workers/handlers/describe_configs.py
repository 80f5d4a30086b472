"""DescribeConfigs v0-3: a topic's effective configs (its overrides over the broker defaults)
and a broker's main settings, so admin tools can read back what CreateTopics set."""

from __future__ import annotations

from appliance.control.topics import topic_log_config
from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import describe_configs
from klog.protocol.error_codes import ErrorCode

API_KEY = describe_configs.SPEC.key
TOPIC, BROKER = 2, 4
SOURCE_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5
TYPE_STRING = 2


def _entry(name, value, source, read_only=False):
    return describe_configs.DescribeConfigsResourceResult(
        name=name, value=value, read_only=read_only, is_default=source == SOURCE_DEFAULT,
        config_source=source, is_sensitive=False, synonyms=[], config_type=TYPE_STRING,
        documentation=None)


def _topic_configs(worker, name):
    info = worker.control.topic(name)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist", []
    effective = topic_log_config(worker.control.defaults, info.configs).to_kafka()
    return ErrorCode.NONE, None, [
        _entry(key, value, SOURCE_TOPIC if key in info.configs else SOURCE_DEFAULT)
        for key, value in sorted(effective.items())
    ]


def _broker_configs(worker, name):
    if name not in ("", str(worker.node_id), str(worker.config.broker_id)):
        return ErrorCode.INVALID_REQUEST, f"unknown broker {name!r}", []
    config = worker.config
    values = {
        "broker.id": str(config.broker_id),
        "listeners": ",".join(map(str, config.listeners)),
        "advertised.listeners": ",".join(map(str, config.advertised_endpoints)),
        "log.dirs": ",".join(str(p) for p in config.log_dirs),
        "num.partitions": str(config.num_partitions),
        "auto.create.topics.enable": str(config.auto_create_topics_enable).lower(),
        "socket.request.max.bytes": str(config.socket_request_max_bytes),
    }
    return ErrorCode.NONE, None, [
        _entry(k, v, SOURCE_STATIC_BROKER, read_only=True) for k, v in sorted(values.items())]


def handle(worker: HandlerContext, request):
    results = []
    for resource in request.body.resources:
        if resource.resource_type == TOPIC and not access.on_topic(
                worker, request, Operation.DESCRIBE_CONFIGS, resource.resource_name):
            error, message, configs = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, []
        elif resource.resource_type == BROKER and not access.on_cluster(
                worker, request, Operation.DESCRIBE_CONFIGS):
            error, message, configs = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, []
        elif resource.resource_type == TOPIC:
            error, message, configs = _topic_configs(worker, resource.resource_name)
        elif resource.resource_type == BROKER:
            error, message, configs = _broker_configs(worker, resource.resource_name)
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
