"""CreatePartitions v0-1: through the controller, which places the new partitions.

Manual assignments are refused (as in CreateTopics): placement is the controller's decision.
"""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import create_partitions
from klog.protocol.error_codes import ErrorCode

API_KEY = create_partitions.SPEC.key


def _add(worker: HandlerContext, topic, validate_only: bool):
    if topic.assignments is not None:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "manual replica assignment is not supported"
    result = worker.control.create_partitions(topic.name, topic.count,
                                                 validate_only=validate_only)
    return result.error, result.message


def handle(worker: HandlerContext, request):
    body = request.body
    results = []
    seen = set()
    for topic in body.topics:
        if topic.name in seen:
            error, message = ErrorCode.INVALID_REQUEST, f"topic {topic.name!r} is listed twice"
        elif not access.on_topic(worker, request, Operation.ALTER, topic.name):
            error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
        else:
            error, message = _add(worker, topic, body.validate_only)
        seen.add(topic.name)
        results.append(create_partitions.CreatePartitionsTopicResult(
            name=topic.name, error_code=int(error), error_message=message))
    return create_partitions.Response(throttle_time_ms=0, results=results)
