"""DeleteTopics v1-3: through the controller; the owners delete the partitions' files."""

from __future__ import annotations

from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import delete_topics

API_KEY = delete_topics.SPEC.key


def handle(worker: HandlerContext, request):
    results = []
    for name in request.body.topic_names:
        result = worker.control.delete_topic(name)
        results.append(delete_topics.DeletableTopicResult(
            name=name, error_code=int(result.error)))
    return delete_topics.Response(throttle_time_ms=0, responses=results)
