"""Bad input on the wire: random frames, truncations, wrong sizes, unknown api keys, huge
length prefixes and bad CRCs. Each gets a Kafka error or a closed connection; the worker
never dies, its memory stays bounded, and a bystander connection keeps being served."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from klog.protocol.apis import api_versions, metadata, produce
from klog.protocol.client import ClientConnection
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch
from tests.interop.helpers import create_topic
from tests.worker.raw import RawClient


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def header(api_key, version, correlation_id=1, client_id=b"fuzz"):
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def valid_produce_frame(corrupt_crc: bool) -> bytes:
    batch = bytearray(build_batch([(1000, b"k", b"v" * 50, [])]))
    if corrupt_crc:
        batch[-1] ^= 0xFF
    codec = ClientConnection(client_id="fuzz")
    _, data = codec.send_request(produce.SPEC.key, 8, produce.Request(
        transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
            produce.TopicProduceData(name="fuzzed", partition_data=[
                produce.PartitionProduceData(index=0, records=bytes(batch))])]))
    return data


api_keys = st.sampled_from([0, 1, 2, 3, 18, 19, 20, 22, 32, 999, -1, 17, 60])
frames = st.one_of(
    st.binary(max_size=300),                                              # noise
    st.builds(lambda k, v, b: frame(header(k, v) + b), api_keys,          # header + noise
              st.integers(-2, 20), st.binary(max_size=200)),
    st.builds(lambda n, b: struct.pack(">i", n) + b,                      # lying sizes
              st.sampled_from([-1, -2**31, 2**31 - 1, 10**9, 200 * 1024 * 1024]),
              st.binary(max_size=64)),
    st.builds(lambda k, v, cut: frame(header(k, v) + b"\x00" * 40)[:cut],  # truncated
              api_keys, st.integers(0, 12), st.integers(0, 20)),
)


def complete_frames(data: bytes) -> int:
    """How many whole size-prefixed frames `data` starts with (a negative size ends them):
    the most answers the broker can owe for it."""
    count, at = 0, 0
    while len(data) - at >= 4:
        size = struct.unpack_from(">i", data, at)[0]
        if size < 0 or len(data) - at - 4 < size:
            break
        count, at = count + 1, at + 4 + size
    return count


def answer_or_close(port: int, data: bytes, end_ours: bool = True) -> bytes:
    """Send the bytes, then read until the broker answers or closes (or stays silent); then,
    if `end_ours`, end our side (what closing the socket did, without first waiting out a
    silence on the success path or on a partial frame the broker can only wait on) and read
    until it closes (or stays silent). Without `end_ours`, only the broker ends it."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(data)
        sock.settimeout(0.3)
        owed = complete_frames(data)
        received = b""
        try:
            while complete_frames(received) < owed or not end_ours:
                chunk = sock.recv(65536)
                if not chunk:
                    return received
                received += chunk
            sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(65536):
                received += chunk
        except (TimeoutError, ConnectionResetError, BrokenPipeError):
            pass
        return received


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory):
    from tests.conftest import Appliance

    appliance = Appliance(tmp_path_factory.mktemp("fuzz"))
    appliance.start()
    create_topic(appliance.bootstrap, "fuzzed", 1)
    yield appliance
    appliance.stop()


def produce_error_of(reply: bytes) -> int:
    codec = ClientConnection(client_id="fuzz")
    codec.send_request(produce.SPEC.key, 8, produce.Request(acks=1, topic_data=[]))
    codec.receive_data(reply)
    _, body = codec.next_response()
    return body.responses[0].partition_responses[0].error_code


def test_bad_crc_gets_corrupt_message_and_good_batch_is_accepted(fuzz_target):
    bad = answer_or_close(fuzz_target.port, valid_produce_frame(corrupt_crc=True))
    assert produce_error_of(bad) == ErrorCode.CORRUPT_MESSAGE
    good = answer_or_close(fuzz_target.port, valid_produce_frame(corrupt_crc=False))
    assert produce_error_of(good) == ErrorCode.NONE


def test_huge_length_prefix_closes_without_allocating(fuzz_target):
    before = rss_kib(fuzz_target.process.pid)
    for _ in range(20):
        answer_or_close(fuzz_target.port, struct.pack(">i", 2**31 - 1) + b"x" * 1000,
                        end_ours=False)
    assert rss_kib(fuzz_target.process.pid) - before < 50 * 1024


@seed(20261122)
@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=frames)
def test_random_frames_never_hurt_the_worker(fuzz_target, data):
    bystander = RawClient(fuzz_target.port)
    answer_or_close(fuzz_target.port, data)
    assert fuzz_target.process.poll() is None, "the worker died"
    versions = bystander.call(api_versions, 0)
    assert versions.error_code == 0
    described = bystander.call(metadata, 8, topics=None, allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False)
    assert "fuzzed" in [t.name for t in described.topics]
    bystander.close()


def test_memory_stays_bounded_after_the_fuzzing(fuzz_target):
    rss = rss_kib(fuzz_target.process.pid)
    assert rss < 300 * 1024, f"worker RSS grew to {rss} KiB"
