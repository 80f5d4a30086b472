"""The Java client's key partitioner: murmur2, so a key lands where any Kafka client puts it.

Kafka's ``Utils.murmur2`` is MurmurHash2 (32-bit, seed ``0x9747b28c``) over the key bytes read
as little-endian words; the default partitioner takes ``toPositive(murmur2(key)) %
num_partitions`` where ``toPositive`` clears the sign bit. librdkafka's ``murmur2_random``
partitioner (kcat, confluent-kafka) and kafka-python compute the same value. Pure functions:
no state, no randomness (keyless records are the producer's business).
"""

from __future__ import annotations

import struct

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Java's ``Utils.murmur2(data)``: a signed 32-bit int, as the Java client returns it."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length >> 2
    m = _M
    mask = _MASK
    for k in struct.unpack_from(f"<{words}I", data):
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = length & 3
    if tail:
        base = words << 2
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows)."""
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition the Java client's default partitioner picks for a non-null ``key``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
