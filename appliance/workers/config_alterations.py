"""AlterConfigs and IncrementalAlterConfigs, one resource at a time: the new set of configs is
computed and checked here (Kafka's error codes, the key named), and only a whole valid set
goes to the control plane, so a refusal changes nothing.

Resources: topics (their overrides, kept with the topic) and brokers: a node id (the worker
that answers for it, as Kafka's broker answers for its own id) or "" for every broker's
default (`<default>`); their keys are `appliance.dynamic_broker.DYNAMIC_KEYS`, kept in the
dynamic config store.

Kafka's answers: an unknown topic UNKNOWN_TOPIC_OR_PARTITION; an unknown key, a value that
does not parse or a key that cannot change dynamically INVALID_CONFIG; a malformed request
(a resource or key listed twice, an unknown operation or resource type, APPEND to a key that
is not a list, another broker's id) INVALID_REQUEST.
"""

from __future__ import annotations

from appliance import dynamic_broker
from appliance.control.dynamic_configs import DEFAULT_ENTITY, entity
from appliance.control.topics import topic_log_config
from appliance.security.acls import Operation
from appliance.workers import access
from klog.protocol.apis.incremental_alter_configs import APPEND, DELETE, SET, SUBTRACT
from klog.protocol.error_codes import ErrorCode

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
LIST_KEYS = frozenset({"cleanup.policy", "leader.replication.throttled.replicas",
                       "follower.replication.throttled.replicas", "log.cleanup.policy"})


class Refused(Exception):
    def __init__(self, error: ErrorCode, message: str):
        super().__init__(message)
        self.error = error
        self.message = message


def answer(worker, request, api, *, incremental: bool):
    """The whole answer of AlterConfigs or IncrementalAlterConfigs (`api`, whose responses
    have the same shape): one entry per resource, in order."""
    body = request.body
    outcomes = alter_all(worker, request, body.resources, incremental=incremental,
                         validate_only=body.validate_only)
    return api.Response(throttle_time_ms=0, responses=[
        api.AlterConfigsResourceResponse(error_code=int(error), error_message=message,
                                         resource_type=r.resource_type,
                                         resource_name=r.resource_name)
        for r, (error, message) in zip(body.resources, outcomes, strict=True)])


def alter_all(worker, request, resources, *, incremental: bool,
              validate_only: bool) -> list[tuple[ErrorCode, str | None]]:
    """One (error, message) per resource, in order."""
    counts: dict[tuple[int, str], int] = {}
    for r in resources:
        counts[(r.resource_type, r.resource_name)] = counts.get(
            (r.resource_type, r.resource_name), 0) + 1
    results = []
    for resource in resources:
        try:
            if counts[(resource.resource_type, resource.resource_name)] > 1:
                raise Refused(ErrorCode.INVALID_REQUEST, "Error due to duplicate resource "
                              f"{resource.resource_name!r} of type {resource.resource_type}")
            results.append(_alter(worker, request, resource, incremental, validate_only))
        except Refused as refused:
            results.append((refused.error, refused.message))
    return results


def _alter(worker, request, resource, incremental: bool, validate_only: bool):
    if resource.resource_type == TOPIC:
        if not access.on_topic(worker, request, Operation.ALTER_CONFIGS,
                               resource.resource_name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
        return _alter_topic(worker, resource, incremental, validate_only)
    if resource.resource_type == BROKER:
        if not access.on_cluster(worker, request, Operation.ALTER_CONFIGS):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
        return _alter_broker(worker, resource, incremental, validate_only)
    if resource.resource_type == BROKER_LOGGER and not access.on_cluster(
            worker, request, Operation.ALTER_CONFIGS):  # Kafka checks before it looks further
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
    raise Refused(ErrorCode.INVALID_REQUEST,
                  f"resource type {resource.resource_type} cannot be altered here")


def _new_configs(current: dict[str, str], configs, incremental: bool,
                 effective: dict[str, str]) -> dict[str, str]:
    """The whole new set: AlterConfigs' replaces, IncrementalAlterConfigs' operations over
    `current` (APPEND and SUBTRACT start from the `effective` value of a list key)."""
    names = [c.name for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise Refused(ErrorCode.INVALID_REQUEST,
                      f"Error due to duplicate config keys: {', '.join(duplicates)}")
    if not incremental:
        for c in configs:
            if c.value is None:
                raise Refused(ErrorCode.INVALID_REQUEST, f"Null value not supported for: "
                                                         f"{c.name}")
        return {c.name: c.value for c in configs}
    new = dict(current)
    for c in configs:
        op = c.config_operation
        if op == SET:
            if c.value is None:
                raise Refused(ErrorCode.INVALID_REQUEST,
                              f"Null value not supported for: {c.name}")
            new[c.name] = c.value
        elif op == DELETE:
            new.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            if c.name not in LIST_KEYS:
                raise Refused(ErrorCode.INVALID_REQUEST,
                              f"Config value append is not allowed for config key: {c.name}"
                              if op == APPEND else
                              f"Config value subtract is not allowed for config key: {c.name}")
            base = new.get(c.name, effective.get(c.name, ""))
            items = [i.strip() for i in base.split(",") if i.strip()]
            given = [i.strip() for i in (c.value or "").split(",") if i.strip()]
            if op == APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            new[c.name] = ",".join(items)
        else:
            raise Refused(ErrorCode.INVALID_REQUEST,
                          f"unknown config operation {op} for config key: {c.name}")
    return new


def _alter_topic(worker, resource, incremental: bool, validate_only: bool):
    name = resource.resource_name
    info = worker.control.topic(name)
    if info is None:
        raise Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    effective = topic_log_config(worker.control.defaults, info.configs).to_kafka()
    new = _new_configs(info.configs, resource.configs, incremental, effective)
    try:
        topic_log_config(worker.control.defaults, new)
    except ValueError as exc:
        raise Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None
    result = worker.control.alter_topic_configs(name, new, validate_only=validate_only)
    return result.error, result.message


def broker_entity(worker, name: str) -> str:
    """The dynamic config entity a broker resource names: "" the default, else this node."""
    if name == "":
        return DEFAULT_ENTITY
    if name != str(worker.node_id):
        raise Refused(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected "
                                                 f"{worker.node_id} or empty string, but "
                                                 f"received {name}")
    return name


def _alter_broker(worker, resource, incremental: bool, validate_only: bool):
    name = broker_entity(worker, resource.resource_name)
    current = entity(worker.control.dynamic_configs, "brokers", name)
    effective = {"log.cleanup.policy": worker.config.log_defaults.cleanup_policy}
    new = _new_configs(current, resource.configs, incremental, effective)
    problem = dynamic_broker.check(new, worker.dynamic.static)
    if problem is not None:
        raise Refused(ErrorCode.INVALID_CONFIG, problem)
    if validate_only:
        return ErrorCode.NONE, None
    changes: dict[str, str | None] = {k: v for k, v in new.items() if current.get(k) != v}
    changes.update({k: None for k in current if k not in new})
    if not changes:
        return ErrorCode.NONE, None
    return worker.control.alter_dynamic_configs("brokers", name, changes)
