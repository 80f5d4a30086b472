"""Which send() a Producer gets: the compiled one for its commonest call, or the Python one.

``klog.producer._sendc`` (C, built by ``setup.py`` during ``pip install``, optional) handles
``send(topic, value)`` with a bytes value, and ``send_batch(topic, values)`` with bytes
values (both producers'), to a topic whose sticky batch is open and has room, and hands
every other call to the Python ``Producer.send`` / ``send_batch`` unchanged (its module
docstring says exactly which). It is used only where the Python path would do nothing more
than append: no value or key serializer, no transactions (their checks wrap send). The
Python path stays the reference: ``KLOG_PURE_PYTHON=1`` (any value but empty or ``0``) keeps
it alone, as it does for the records codec; ``tests/client/test_fast_send.py`` checks that
both store the same.
"""

from __future__ import annotations

import os

try:
    from klog.producer import _sendc
except ImportError as exc:  # built optionally: no compiler or headers at install time
    _sendc = None
    FALLBACK_REASON = f"the compiled send is not built ({exc})"
else:
    if os.environ.get("KLOG_PURE_PYTHON", "") not in ("", "0"):
        _sendc = None
        FALLBACK_REASON = "KLOG_PURE_PYTHON is set"
    else:
        FALLBACK_REASON = ""

IMPLEMENTATION = "python" if _sendc is None else "C"


def _bytes_total(values) -> int | None:
    """The reference for ``_sendc.bytes_total``."""
    if {*map(type, values)} <= {bytes}:
        return sum(map(len, values))
    return None


#: send_batch's values: the total of their lengths if every one is ``bytes``, else None
#: (then each is checked on its own)
bytes_total = _bytes_total if _sendc is None else _sendc.bytes_total


def compiled_send(producer, slow, lock=None, future_type=None, slow_batch=None,
                  list_type=None):
    """The compiled send bound to `producer`'s state (its `disable()` for close), or None
    where the Python `slow` send must serve every call. With `slow_batch` (the Python
    send_batch) its ``send_batch`` serves ``send_batch(topic, values)`` too, returning a
    `list_type` (FutureRecordMetadataList by default: a class whose one slot is
    ``_spans``).

    `lock` is the one every append takes (the blocking producer's own by default; the
    asyncio producer, whose appends all run on its loop's thread, passes one of its own), and
    `future_type` the handle returned, a tuple subclass ``(batch, index)``
    (FutureRecordMetadata by default)."""
    if _sendc is None:
        return None
    config, core = producer.config, producer._core
    if (config.value_serializer is not None or config.key_serializer is not None
            or core.transactions is not None):
        return None
    from klog.producer.accumulator import RECORD_OVERHEAD
    from klog.producer.batch import ProducerBatch
    from klog.producer.futures import FutureRecordMetadata, FutureRecordMetadataList
    accumulator = core.accumulator
    return _sendc.FastSend(
        slow=slow, lock=producer._lock if lock is None else lock, sticky=accumulator._sticky,
        leaders=core.cluster.leaders, accumulator=accumulator,
        future_type=FutureRecordMetadata if future_type is None else future_type,
        batch_type=ProducerBatch,
        batch_size=accumulator.batch_size,
        max_request_size=core._max_request_size, buffer_memory=core._buffer_memory,
        overhead=RECORD_OVERHEAD,
        slow_batch=slow_batch,
        list_type=FutureRecordMetadataList if list_type is None else list_type)
