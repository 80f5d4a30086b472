"""klog.protocol.partitioner: the Java client's murmur2, checked against kafka-python's port."""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from klog.protocol.partitioner import murmur2, partition_for_key, to_positive

# org.apache.kafka.common.utils.UtilsTest#testMurmur2: Java's signed results
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "value"), JAVA_VECTORS.items())
def test_java_vectors(key, value):
    assert murmur2(key) == value


def test_matches_kafka_python_for_many_keys():
    rnd = random.Random(2011)
    keys = [b""] + [rnd.randbytes(rnd.randrange(1, 64)) for _ in range(20_000)]
    keys += [f"user-{i}".encode() for i in range(2000)] + ["ключ-é-🔑".encode()]
    for key in keys:
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key), key
        for partitions in (1, 3, 12, 1000):
            expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions
            assert partition_for_key(key, partitions) == expected


def test_accepts_bytes_like_keys():
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


def test_to_positive_clears_the_sign_bit_rather_than_negating():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def test_partition_count_must_be_positive():
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for_key(b"k", 0)
