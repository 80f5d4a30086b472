"""The producer's compiled send() and send_batch() (klog/producer/_sendc.c, chosen by
fast_send.py) against a real appliance, beside the Python calls they stand in for.

They handle ``send(topic, bytes)`` and ``send_batch(topic, [bytes, ...])`` to an open sticky
batch and hand everything else to the Python path; these tests mix both kinds of call, from
several threads, and read back what the appliance stored: the same records, in the order each
thread sent them, acknowledged once. The same sequence run with ``KLOG_PURE_PYTHON=1`` (the
Python path alone) stores the same records. A send() or send_batch() kept from before close()
fails as the Python one does. Under ``KLOG_PURE_PYTHON=1`` (make test's second pass) the
compiled path is off, and the tests that need it skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

import klog
from klog.errors import ClosedError
from klog.producer import fast_send
from tests.client.conftest import read_all
from tests.conftest import REPO

compiled = pytest.mark.skipif(fast_send.IMPLEMENTATION != "C",
                              reason=f"the compiled send is off: {fast_send.FALLBACK_REASON}")


def mixed_sends(producer: klog.Producer, topic: str, tag: bytes, count: int) -> list:
    """Calls of every shape, in a fixed order: mostly the compiled path's, and each of the
    shapes it hands on (key, headers, partition, timestamp, a bytearray value, keyword
    arguments, send_batch's segments in the middle of a batch)."""
    futures = []
    for i in range(count):
        value = b"%s-%06d" % (tag, i)
        shape = i % 50
        if shape == 10:
            futures.append(producer.send(topic, value, key=b"k%d" % i))
        elif shape == 20:
            futures.append(producer.send(topic, value, headers=[("h", b"%d" % i)]))
        elif shape == 30:
            futures.append(producer.send(topic, bytearray(value)))
        elif shape == 35:
            futures.append(producer.send(topic, value=value))
        elif shape == 40:
            futures.extend(producer.send_batch(topic, [value, value + b"+"]).result(30))
        else:
            futures.append(producer.send(topic, value))
    return futures


def batch_calls(tag: bytes, count: int):
    """The calls of `mixed_batches`, in order: ``(method, args, kwargs, after)``, where
    ``after`` (or None) changes the call's list once the call returned."""
    for i in range(count):
        values = [b"%s-%05d-%d" % (tag, i, j) for j in range(1 + i % 7)]
        shape = i % 20
        if shape == 3:
            yield "send_batch", (tuple(values),), {}, None
        elif shape == 5:
            yield "send_batch", (values,), {"key": b"k%d" % i}, None
        elif shape == 7:
            yield "send", (values[0],), {}, None
        elif shape == 9:
            yield "send_batch", (values + [None, bytearray(b"ba")],), {}, None
        elif shape == 11:  # the call kept its own copy
            yield "send_batch", (values,), {}, lambda values=values: (
                values.__setitem__(0, b"changed after the call"),
                values.append(b"appended after the call"))
        elif shape == 13:
            yield "send_batch", (), {"values": values}, None
        elif shape == 15:
            yield "send_batch", ([],), {}, None
        elif shape == 17:
            yield "send_batch", (values,), {"partition": 0}, None
        else:
            yield "send_batch", (values,), {}, None


def mixed_batches(producer: klog.Producer, topic: str, tag: bytes, count: int) -> list:
    """send_batch calls of every shape, in a fixed order, and what each returned: mostly
    the compiled path's (lists of bytes), and each shape it hands on (a tuple, a key, a
    partition, a None or a bytearray among the values, keyword arguments, an empty list),
    single sends between them, and a list the caller changes after the call."""
    handles = []
    for method, args, kwargs, after in batch_calls(tag, count):
        handles.append(getattr(producer, method)(topic, *args, **kwargs))
        if after is not None:
            after()
    return handles


def batches_count(count: int) -> int:
    """How many records ``mixed_batches`` sends."""
    total = 0
    for i in range(count):
        shape = i % 20
        total += 0 if shape == 15 else 1 if shape == 7 else 1 + i % 7 + (2 if shape == 9 else 0)
    return total


def stored(bootstrap: str, topic: str, count: int) -> list[tuple]:
    records = read_all(bootstrap, topic, count)
    return [(r.offset, r.key, r.value, tuple(r.headers or ())) for r in records]


def on_the_python_path(bootstrap: str, calls: str, topic: str, tag: bytes, count: int,
                       **options) -> None:
    """Make the same calls (this module's `calls` function) with the Python path alone: in a
    child process under KLOG_PURE_PYTHON=1, since the switch is read at import."""
    script = (
        "import klog\n"
        f"from tests.client.test_fast_send import {calls}\n"
        f"p = klog.Producer(bootstrap_servers={bootstrap!r}, linger_ms=2, **{options!r})\n"
        "assert p._fast_send is None\n"
        f"{calls}(p, {topic!r}, {tag!r}, {count})\n"
        "p.close(30)\n")
    env = dict(os.environ, KLOG_PURE_PYTHON="1")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def expected_count(count: int) -> int:
    return count + count // 50  # each send_batch adds a second value


@compiled
def test_compiled_and_python_sends_store_the_same_records(broker, topic_factory):
    topic = topic_factory(1)
    count = 3_000
    with klog.Producer(bootstrap_servers=broker.bootstrap, linger_ms=2) as producer:
        assert producer._fast_send is not None
        mixed_sends(producer, topic, b"v", count)
        producer.flush(30)
        taken, passed = producer._fast_send.counts()
        assert producer.statistics()["buffered_bytes"] == 0
    assert taken > count // 2 and passed > count // 50  # both paths served calls
    ours = stored(broker.bootstrap, topic, expected_count(count))

    pure_topic = topic_factory(1)
    on_the_python_path(broker.bootstrap, "mixed_sends", pure_topic, b"v", count)
    assert stored(broker.bootstrap, pure_topic, expected_count(count)) == ours
    assert [offset for offset, *_ in ours] == list(range(expected_count(count)))


@compiled
@pytest.mark.parametrize("batch_size", [4096, None])
def test_compiled_and_python_send_batch_store_the_same_records(broker, topic_factory,
                                                                batch_size):
    """With 4 KiB batches many calls do not fit the open batch and go to the Python path,
    which splits them; at the default every call of bytes fits and the compiled one takes
    it. Every handle gives each record's offset; the stored records are those of the same
    calls made with the Python path alone."""
    topic = topic_factory(1)
    count = 2_000
    sizes = {} if batch_size is None else {"batch_size": batch_size}
    with klog.Producer(bootstrap_servers=broker.bootstrap, linger_ms=2, **sizes) as producer:
        handles = mixed_batches(producer, topic, b"b", count)
        producer.flush(30)
        taken, passed = producer._fast_send.batch_counts()
        offsets = []
        for handle in handles:
            result = handle.result(30)
            offsets.extend(m.offset for m in (result if isinstance(result, list) else [result]))
        assert producer.statistics()["buffered_bytes"] == 0
    total = batches_count(count)
    assert offsets == list(range(total))  # each record's handle names its own offset
    assert taken > count // 2 and passed >= count * 5 // 20  # both paths served calls
    ours = stored(broker.bootstrap, topic, total)
    assert b"changed after the call" not in {value for _, _, value, _ in ours}

    pure_topic = topic_factory(1)
    on_the_python_path(broker.bootstrap, "mixed_batches", pure_topic, b"b", count, **sizes)
    assert stored(broker.bootstrap, pure_topic, total) == ours


@compiled
def test_threads_sending_at_once_lose_and_repeat_nothing(broker, topic_factory):
    """The compiled path takes the producer's lock without waiting and hands the call on when
    the sender (or another thread's Python path) holds it: every record once, each thread's
    in its order."""
    topic = topic_factory(2)
    threads_n, count = 4, 5_000
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        futures: dict[int, list] = {}

        def run(n: int) -> None:
            futures[n] = mixed_sends(producer, topic, b"t%d" % n, count)

        threads = [threading.Thread(target=run, args=(n,)) for n in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        producer.flush(30)
        acked = [f.result(30) if isinstance(f, klog.FutureRecordMetadata) else f
                 for n in range(threads_n) for f in futures[n]]
        taken, _ = producer._fast_send.counts()
    assert taken > threads_n * count // 2
    total = threads_n * expected_count(count)
    assert len({(m.partition, m.offset) for m in acked}) == total  # one offset each
    records = read_all(broker.bootstrap, topic, total)
    assert len(records) == total
    values = [r.value for r in records]
    assert len(set(values)) == total  # every value is distinct: none stored twice
    for n in range(threads_n):
        tag = b"t%d-" % n
        for partition in (0, 1):
            mine = [r.value for r in records if r.partition == partition
                    and r.value.startswith(tag)]
            assert mine == sorted(mine), f"thread {n}'s records out of order in {partition}"


@compiled
def test_a_send_kept_from_before_close_fails_as_the_python_one(broker, topic_factory):
    topic = topic_factory(1)
    producer = klog.Producer(bootstrap_servers=broker.bootstrap)
    send = producer.send
    send(topic, b"before").result(30)
    send(topic, b"open batch")  # the batch stays open: the compiled path's case
    producer.close(30)
    with pytest.raises(ClosedError):
        send(topic, b"after")
    assert [r.value for r in read_all(broker.bootstrap, topic, 2)] == [b"before", b"open batch"]


@compiled
def test_a_send_batch_kept_from_before_close_fails_as_the_python_one(broker, topic_factory):
    topic = topic_factory(1)
    producer = klog.Producer(bootstrap_servers=broker.bootstrap)
    send_batch = producer.send_batch
    send_batch(topic, [b"before"]).result(30)
    producer.send(topic, b"open batch")
    handle = send_batch(topic, [b"one", b"two"])  # to the open batch: the compiled path
    assert producer._fast_send.batch_counts()[0] >= 1
    producer.close(30)
    assert [m.offset for m in handle.result(0)] == [2, 3]
    with pytest.raises(ClosedError):
        send_batch(topic, [b"after"])
    assert [r.value for r in read_all(broker.bootstrap, topic, 4)] == \
        [b"before", b"open batch", b"one", b"two"]


def test_the_python_path_alone_under_klog_pure_python(broker, topic_factory):
    """What make test's second pass runs: no compiled send, the same records."""
    topic = topic_factory(1)
    env = dict(os.environ, KLOG_PURE_PYTHON="1")
    script = (
        "import klog\n"
        "from klog.producer import fast_send\n"
        "assert fast_send.IMPLEMENTATION == 'python', fast_send.FALLBACK_REASON\n"
        f"with klog.Producer(bootstrap_servers={broker.bootstrap!r}) as p:\n"
        "    assert p._fast_send is None\n"
        f"    [p.send({topic!r}, b'%d' % i) for i in range(100)]\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [r.value for r in read_all(broker.bootstrap, topic, 100)] == \
        [b"%d" % i for i in range(100)]


@compiled
@pytest.mark.parametrize("values", [
    [], [b""], [b"a", b"bc", b"x" * 100_000], (b"ab", b"c"),
    [b"a", None], [b"a", bytearray(b"b")], [memoryview(b"ab")], [b"a", "b"],
    [type("Bytes", (bytes,), {})(b"sub")],  # a bytes subclass: checked one by one
])
def test_compiled_bytes_total_is_the_python_one(values):
    from klog.producer import _sendc
    assert _sendc.bytes_total(values) == fast_send._bytes_total(values)


def test_send_batch_of_values_not_all_bytes_is_checked_one_by_one(broker, topic_factory):
    topic = topic_factory(1)
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        done = producer.send_batch(topic, [b"a", bytearray(b"b"), None, memoryview(b"c")])
        assert [m.offset for m in done.result(30)] == [0, 1, 2, 3]
        with pytest.raises(TypeError):
            producer.send_batch(topic, [b"a", "text"])
    assert [r.value for r in read_all(broker.bootstrap, topic, 4)] == [b"a", b"b", None, b"c"]
