"""DeleteTopics v1-3: through the controller; the owners delete the partitions' files."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import delete_topics
from klog.protocol.error_codes import ErrorCode

API_KEY = delete_topics.SPEC.key


def handle(worker: HandlerContext, request):
    results = []
    for name in request.body.topic_names:
        if not access.on_topic(worker, request, Operation.DELETE, name):
            error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        else:
            error = worker.control.delete_topic(name).error
        results.append(delete_topics.DeletableTopicResult(name=name, error_code=int(error)))
    return delete_topics.Response(throttle_time_ms=0, responses=results)
