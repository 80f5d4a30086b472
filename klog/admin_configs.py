"""Dynamic configs through klog.Admin: DescribeConfigs and IncrementalAlterConfigs of topics and
brokers, as Kafka's kafka-configs tool uses them.

A broker's own configs are asked of that broker (Kafka answers only for its own id), so a
request naming a node goes to the node; a topic's, or the brokers' default (name ""), to the
admin's bootstrap broker.
"""

from __future__ import annotations

from dataclasses import dataclass

from klog.errors import raise_for
from klog.protocol.apis import describe_configs, incremental_alter_configs, metadata

__all__ = ["ConfigEntry", "SOURCES", "alter_configs", "describe_configs_of"]

RESOURCE_TYPES = {"topics": 2, "brokers": 4}
# Kafka's ConfigSource names, by the number DescribeConfigs answers
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG"}
SET, DELETE = incremental_alter_configs.SET, incremental_alter_configs.DELETE


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str  # a SOURCES name
    read_only: bool
    synonyms: tuple[tuple[str, str | None, str], ...]  # (name, value, source), in force first


def _connection(admin, entity_type: str, name: str):
    if entity_type != "brokers" or name == "":
        return admin._conn
    answer = admin._conn.call(metadata, topics=[], allow_auto_topic_creation=False)
    broker = next((b for b in answer.brokers if str(b.node_id) == name), None)
    if broker is None:
        raise ValueError(f"broker {name} is not in the cluster's metadata")
    return admin._node(broker.node_id, broker.host, broker.port)


def _resource_type(entity_type: str) -> int:
    try:
        return RESOURCE_TYPES[entity_type]
    except KeyError:
        raise ValueError(f"entity type {entity_type!r}: one of "
                         f"{', '.join(RESOURCE_TYPES)}") from None


def describe_configs_of(admin, entity_type: str, name: str) -> list[ConfigEntry]:
    """Every config of a topic or broker, with its source and synonyms."""
    resource = describe_configs.DescribeConfigsResource(
        resource_type=_resource_type(entity_type), resource_name=name, configuration_keys=None)
    conn = _connection(admin, entity_type, name)
    answer = conn.call(describe_configs, resources=[resource], include_synonyms=True,
                       include_documentation=False)
    (result,) = answer.results
    raise_for(result.error_code, result.error_message, broker=conn.address)
    return [ConfigEntry(c.name, c.value, SOURCES.get(c.config_source, "UNKNOWN"), c.read_only,
                        tuple((s.name, s.value, SOURCES.get(s.source, "UNKNOWN"))
                              for s in c.synonyms or ()))
            for c in result.configs]


def alter_configs(admin, entity_type: str, name: str, *, add: dict[str, str] | None = None,
                  delete: list[str] | tuple[str, ...] = (),
                  validate_only: bool = False) -> None:
    """Set the `add` keys and delete the `delete` ones (IncrementalAlterConfigs); raises the
    broker's refusal (KafkaError naming the key)."""
    configs = [incremental_alter_configs.AlterableConfig(name=k, config_operation=SET, value=v)
               for k, v in (add or {}).items()]
    configs += [incremental_alter_configs.AlterableConfig(name=k, config_operation=DELETE,
                                                          value=None) for k in delete]
    conn = _connection(admin, entity_type, name)
    answer = conn.call(incremental_alter_configs, resources=[
        incremental_alter_configs.AlterConfigsResource(
            resource_type=_resource_type(entity_type), resource_name=name, configs=configs)],
        validate_only=validate_only)
    (result,) = answer.responses
    raise_for(result.error_code, result.error_message, broker=conn.address)
