"""The asyncio producer's compiled send (klog/producer/_sendc.c behind ``send_nowait`` and the
appends of ``await send`` and ``await send_batch``, chosen by fast_send.py) against a real
appliance, beside the Python path: the calls of every shape mixed, the records read back, and
the same sequence run with ``KLOG_PURE_PYTHON=1`` (the Python path alone) storing the same
records. A ``send_nowait`` kept from before close() fails as the Python one does. About 5 s
with the module's appliance.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

import klog
import klog.aio
from klog.errors import ClosedError
from klog.producer import fast_send
from tests.client.test_fast_send import (
    batch_calls,
    batches_count,
    expected_count,
    on_the_python_path,
    stored,
)
from tests.conftest import REPO

compiled = pytest.mark.skipif(fast_send.IMPLEMENTATION != "C",
                              reason=f"the compiled send is off: {fast_send.FALLBACK_REASON}")


async def mixed_sends(producer: klog.aio.AIOProducer, tag: bytes, topic: str,
                      count: int) -> list:
    """Both calls, and each of the shapes the compiled path hands on, in a fixed order."""
    handles = []
    for i in range(count):
        value = b"%s-%06d" % (tag, i)
        shape = i % 50
        if shape == 10:
            handles.append(await producer.send(topic, value, key=b"k%d" % i))
        elif shape == 20:
            handles.append(await producer.send(topic, value, headers=[("h", b"%d" % i)]))
        elif shape == 30:
            handles.append(await producer.send(topic, bytearray(value)))
        elif shape == 40:
            handles.append(await producer.send_batch(topic, [value, value + b"+"]))
        elif i % 2:
            handles.append(await producer.send(topic, value))
        else:
            try:
                handles.append(producer.send_nowait(topic, value))
            except klog.errors.WouldBlockError:
                handles.append(await producer.send(topic, value))
    return [await h for h in handles]


async def produce(bootstrap: str, topic: str, count: int) -> tuple[int, int]:
    async with klog.aio.AIOProducer(bootstrap_servers=bootstrap, linger_ms=2) as producer:
        await producer.send(topic, b"first")  # metadata: send_nowait would block before it
        await mixed_sends(producer, b"v", topic, count)
        counts = [fast.counts() for fast in producer._fast_sends]
    return tuple(sum(c[i] for c in counts) for i in (0, 1)) if counts else (0, 0)


@compiled
def test_compiled_and_python_aio_sends_store_the_same_records(broker, topic_factory):
    topic, pure_topic = topic_factory(1), topic_factory(1)
    count = 3_000
    taken, passed = asyncio.run(asyncio.wait_for(produce(broker.bootstrap, topic, count), 60))
    assert taken > count // 2 and passed > count // 50  # both paths served calls
    ours = stored(broker.bootstrap, topic, expected_count(count) + 1)

    script = (
        "import asyncio\n"
        "from tests.client.test_aio_fast_send import produce\n"
        f"assert asyncio.run(produce({broker.bootstrap!r}, {pure_topic!r}, {count})) == (0, 0)\n")
    env = dict(os.environ, KLOG_PURE_PYTHON="1")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert stored(broker.bootstrap, pure_topic, expected_count(count) + 1) == ours
    assert [offset for offset, *_ in ours] == list(range(expected_count(count) + 1))


@compiled
def test_a_send_nowait_kept_from_before_close_fails_as_the_python_one(broker, topic_factory):
    topic = topic_factory(1)

    async def scenario():
        producer = await klog.aio.AIOProducer(bootstrap_servers=broker.bootstrap).start()
        await (await producer.send(topic, b"before"))
        send_nowait = producer.send_nowait
        assert send_nowait.__self__ is producer._fast_sends[0]
        send_nowait(topic, b"open batch")  # the batch stays open: the compiled path's case
        await producer.close(30)
        with pytest.raises(ClosedError):
            send_nowait(topic, b"after")
        with pytest.raises(ClosedError):
            await producer.send(topic, b"after")

    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert [v for _, _, v, _ in stored(broker.bootstrap, topic, 2)] == [b"before", b"open batch"]


@compiled
def test_compiled_and_python_aio_send_batch_store_the_same_records(broker, topic_factory):
    """`batch_calls` (tests/client/test_fast_send.py) through ``await send_batch``: the
    compiled append takes the calls of bytes that fit the open batch, the rest go the Python
    way; every handle gives its records' offsets, and the records are those the blocking
    producer's Python path stores for the same calls."""
    topic, pure_topic = topic_factory(1), topic_factory(1)
    count = 2_000

    async def scenario():
        async with klog.aio.AIOProducer(bootstrap_servers=broker.bootstrap,
                                        linger_ms=2) as producer:
            handles = []
            for method, args, kwargs, after in batch_calls(b"b", count):
                handles.append(await getattr(producer, method)(topic, *args, **kwargs))
                if after is not None:
                    after()
            offsets = []
            for handle in handles:
                result = await handle
                offsets.extend(m.offset for m in (result if isinstance(result, list)
                                                  else [result]))
            return offsets, producer._fast_sends[1].batch_counts()

    offsets, (taken, passed) = asyncio.run(asyncio.wait_for(scenario(), 60))
    total = batches_count(count)
    assert offsets == list(range(total))
    # both served calls: the coroutine keeps a key, a partition or a timestamp to itself;
    # a None or a bytearray among the values and an empty list reach the compiled append
    assert taken > count // 2 and passed >= count * 2 // 20
    ours = stored(broker.bootstrap, topic, total)
    on_the_python_path(broker.bootstrap, "mixed_batches", pure_topic, b"b", count)
    assert stored(broker.bootstrap, pure_topic, total) == ours
