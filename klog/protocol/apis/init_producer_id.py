"""InitProducerId (key 22): an idempotent (or transactional) producer gets its id and epoch.

kafka-python enables idempotence by default, so this is needed from the first produce. v3+
(KIP-360) carries the producer's current id and epoch, so it can bump its epoch; v4 knows
PRODUCER_FENCED (KIP-588). v5 (KIP-890) is not declared.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, INT64, STRING
from klog.protocol.schema import Field, Message

KEY = 22


class InitProducerIdRequest(Message, versions="0-4", flexible="2+"):
    transactional_id = Field(STRING, nullable="0+")
    transaction_timeout_ms = Field(INT32)
    producer_id = Field(INT64, "3+", default=-1)
    producer_epoch = Field(INT16, "3+", default=-1)


class InitProducerIdResponse(Message, versions="0-4", flexible="2+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16)
    producer_id = Field(INT64, default=-1)
    producer_epoch = Field(INT16)


Request, Response = InitProducerIdRequest, InitProducerIdResponse


def error_response(request: object, version: int, code: int) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code, producer_epoch=-1)
