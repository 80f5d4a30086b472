"""One handler module per Kafka API; the dispatch table is built from their API_KEY.

A handler is `handle(worker, request)` and returns the response body, an awaitable of it (a
fetch that long-polls, a produce that waits for group commit), or NO_RESPONSE.
"""

from __future__ import annotations

from appliance.workers.handlers import (
    api_versions,
    create_topics,
    delete_topics,
    describe_configs,
    fetch,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
)

MODULES = (
    api_versions, metadata, produce, fetch, list_offsets, create_topics, delete_topics,
    init_producer_id, describe_configs,
)

HANDLERS = {module.API_KEY: module.handle for module in MODULES}
