"""Transaction markers (KIP-98): the control batch that ends one producer's transaction on a
partition, as Kafka writes it (attributes transactional + control, base sequence -1, one
record: key version 0 + type 0 ABORT / 1 COMMIT, value version 0 + coordinator epoch)."""

from __future__ import annotations

import struct
from typing import NamedTuple

from klog.protocol.record_batch import CorruptBatchError
from klog.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    build_batch,
    control_record,
    decode_batch,
)

_VALUE = struct.Struct(">hi")


class Marker(NamedTuple):
    commit: bool
    coordinator_epoch: int


def marker_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 now_ms: int) -> bytes:
    key, value = control_record(CONTROL_COMMIT if commit else CONTROL_ABORT, coordinator_epoch)
    return build_batch([(now_ms, key, value, ())], producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=-1,
                       is_transactional=True, is_control=True, now_ms=now_ms)


def read_marker(buf, pos: int = 0) -> Marker | None:
    """The marker of the control batch at `pos`; None when its record is not a transaction
    marker (an unknown control type: Kafka skips those too). Raises CorruptBatchError."""
    _, records = decode_batch(buf, pos, verify_crc=False)
    if not records:
        return None
    key, value = records[0].key, records[0].value
    if key is None or len(key) < 4:
        raise CorruptBatchError(f"control record with key {key!r}")
    kind = struct.unpack_from(">h", key, 2)[0]
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    epoch = _VALUE.unpack_from(value)[1] if value is not None and len(value) >= 6 else -1
    return Marker(kind == CONTROL_COMMIT, epoch)
