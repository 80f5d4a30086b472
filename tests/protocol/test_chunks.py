"""Encoders return chunks: FileRegion placeholders pass through, small pieces are joined, and
the size prefix counts everything, file regions included."""

from __future__ import annotations

import struct

import pytest

from klog.protocol.apis import fetch
from klog.protocol.chunks import (
    PASSTHROUGH_MIN_BYTES,
    ChunkWriter,
    FileRegion,
    chunk_length,
    join_chunks,
)
from klog.protocol.client import ClientConnection
from klog.protocol.exceptions import EncodeError
from klog.protocol.server import ServerConnection


def fetch_exchange(records_per_partition: list):
    """A v11 Fetch request through our client and server, and a response with the given
    records values; returns (client, request, chunks)."""
    client = ClientConnection()
    partitions = [fetch.FetchPartition(partition=i, fetch_offset=0, partition_max_bytes=1 << 20)
                  for i in range(len(records_per_partition))]  # fmt: skip
    _, data = client.send_request(1, 11, fetch.FetchRequest(
        max_wait_ms=10, min_bytes=1, topics=[fetch.FetchTopic(topic="t", partitions=partitions)]))
    server = ServerConnection()
    server.receive_data(data)
    request = server.next_request()
    response = fetch.FetchResponse(responses=[fetch.FetchableTopicResponse(topic="t", partitions=[
        fetch.PartitionData(partition_index=i, high_watermark=5, records=records)
        for i, records in enumerate(records_per_partition)
    ])])  # fmt: skip
    return client, request, server.encode_response(request, response)


def size_prefix_is_right(chunks) -> bool:
    total = sum(chunk_length(chunk) for chunk in chunks)
    return struct.unpack(">i", bytes(chunks[0][:4]))[0] == total - 4


def test_file_regions_pass_through_with_the_right_size_prefix():
    regions = [FileRegion(fd=9, offset=100, length=5000), FileRegion(fd=9, offset=0, length=70)]
    _, _, chunks = fetch_exchange(regions)
    assert [c for c in chunks if isinstance(c, FileRegion)] == regions
    assert all(isinstance(c, bytes) for c in chunks if not isinstance(c, FileRegion))
    assert len(chunks) == 4  # header+partition 0, region, partition 1, region
    assert size_prefix_is_right(chunks)


def test_what_sendfile_would_send_decodes_on_the_client():
    segment = bytes(range(256)) * 40
    region = FileRegion(fd=3, offset=1000, length=6000)
    client, _, chunks = fetch_exchange([region, b"small", None])
    wire = b"".join(
        segment[c.offset : c.offset + c.length] if isinstance(c, FileRegion) else c
        for c in chunks
    )
    client.receive_data(wire)
    _, body = client.next_response()
    records = [p.records for p in body.responses[0].partitions]
    assert records == [segment[1000:7000], b"small", None]


def test_small_records_are_joined_and_large_ones_passed_through():
    small, large = b"s" * 100, b"L" * PASSTHROUGH_MIN_BYTES
    _, _, chunks = fetch_exchange([small, large, small])
    assert len(chunks) == 3 and chunks[1] is large
    assert size_prefix_is_right(chunks)


def test_a_list_of_pieces_is_one_records_value():
    pieces = [b"a" * 10, FileRegion(fd=1, offset=0, length=20), b"b" * 5]
    client, _, chunks = fetch_exchange([pieces])
    assert size_prefix_is_right(chunks)
    wire = b"".join(b"r" * c.length if isinstance(c, FileRegion) else c for c in chunks)
    client.receive_data(wire)
    assert client.next_response()[1].responses[0].partitions[0].records == (
        b"a" * 10 + b"r" * 20 + b"b" * 5
    )


def test_chunk_writer_without_regions_is_one_chunk():
    out = ChunkWriter()
    out += b"abc"
    assert out.finish() == [b"\x00\x00\x00\x03abc"]


def test_join_refuses_file_regions():
    with pytest.raises(EncodeError):
        join_chunks([b"x", FileRegion(0, 0, 1)])


def test_file_region_rejects_negative_numbers():
    with pytest.raises(ValueError):
        FileRegion(fd=1, offset=-1, length=1)
