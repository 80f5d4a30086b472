"""CreateTopics v2-4: through the controller, with validate_only and topic configs."""

from __future__ import annotations

import logging

from appliance.control.topics import topic_log_config
from appliance.descriptor_limits import room_for
from appliance.disk_room import room_for as disk_room_for
from appliance.segments.errors import StorageError
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import create_topics
from klog.protocol.error_codes import ErrorCode

API_KEY = create_topics.SPEC.key
log = logging.getLogger(__name__)


def _create(worker, topic, validate_only):
    if topic.assignments:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "manual replica assignment is not supported"
    configs = {}
    for entry in topic.configs:
        if entry.value is None:
            return ErrorCode.INVALID_CONFIG, f"config {entry.name!r} has a null value"
        configs[entry.name] = entry.value
    if topic.num_partitions > 0 and not validate_only:
        # this worker's share of the new logs must find descriptors (issue 26), checked
        # before anything is decided so that a refusal changes nothing
        workers = max(len(worker.config.log_dirs), 1)
        share = -(-topic.num_partitions // workers)
        short = room_for(share) or _disk_short(worker, share, configs)
        if short is not None:
            return ErrorCode.KAFKA_STORAGE_ERROR, short
    try:
        result = worker.control.create_topic(
            topic.name, topic.num_partitions, topic.replication_factor, configs,
            validate_only=validate_only)
    except StorageError as exc:  # opening this worker's new logs failed (ENOSPC, EIO, ...)
        log.error("CreateTopics %s: %s", topic.name, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR, str(exc)
    return result.error, result.message


def _disk_short(worker, partitions_per_dir: int, configs: dict[str, str]) -> str | None:
    """Why the log dirs cannot preallocate the new logs (disk_room.py), or None."""
    try:
        config = topic_log_config(worker.config.log_defaults, configs)
    except ValueError:
        return None  # a bad config: the controller's answer names it
    return disk_room_for([str(d) for d in worker.config.log_dirs], partitions_per_dir, config)


def handle(worker: HandlerContext, request):
    body = request.body
    results = []
    for topic in body.topics:
        if access.may_create_topic(worker, request, topic.name):
            error, message = _create(worker, topic, body.validate_only)
        else:
            error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
        results.append(create_topics.CreatableTopicResult(
            name=topic.name, error_code=int(error), error_message=message))
    return create_topics.Response(throttle_time_ms=0, topics=results)
