"""ServerConnection: framing, hostile input, version handling and error responses."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import message

from klog.protocol.apis import API_BY_KEY, api_versions, produce
from klog.protocol.chunks import join_chunks
from klog.protocol.client import ClientConnection
from klog.protocol.error_codes import ErrorCode
from klog.protocol.exceptions import EncodeError, FramingError
from klog.protocol.frames import NEED_DATA
from klog.protocol.server import ServerConnection, error_response

I16, I32 = struct.Struct(">h"), struct.Struct(">i")


def frame(api_key: int, version: int, body: bytes, *, correlation_id: int = 7,
          client_id: bytes = b"\x00\x01c", flexible_header: bool = False) -> bytes:  # fmt: skip
    header = struct.pack(">hhi", api_key, version, correlation_id) + client_id
    if flexible_header:
        header += b"\x00"
    content = header + body
    return I32.pack(len(content)) + content


def parse_one(data: bytes, **kwargs):
    server = ServerConnection(**kwargs)
    server.receive_data(data)
    request = server.next_request()
    assert request is not NEED_DATA
    assert server.next_request() is NEED_DATA
    return request


def produce_body(version: int = 8, acks: int = 1) -> produce.ProduceRequest:
    return produce.ProduceRequest(acks=acks, timeout_ms=100, topic_data=[
        produce.TopicProduceData(name="t", partition_data=[
            produce.PartitionProduceData(index=0, records=b"r" * 10),
            produce.PartitionProduceData(index=1, records=None),
        ]),
    ])  # fmt: skip


def wire(version: int, body) -> bytes:
    return ClientConnection(client_id="c").send_request(0, version, body)[1]


# -- framing -------------------------------------------------------------------------------------


def test_many_requests_in_one_receive():
    data = b"".join(wire(8, produce_body()) for _ in range(5))
    server = ServerConnection()
    server.receive_data(data)
    requests = []
    while (request := server.next_request()) is not NEED_DATA:
        requests.append(request)
    assert [r.body for r in requests] == [produce_body()] * 5
    assert server.buffered_bytes == 0


def test_records_are_a_view_of_the_memory_received_into():
    data = wire(8, produce_body())
    server = ServerConnection()
    into = server.get_buffer()
    into[:len(data)] = data
    server.buffer_updated(len(data))
    records = server.next_request().body.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is into.obj
    assert bytes(records) == produce_body().topic_data[0].partition_data[0].records


def test_mutable_input_is_copied():
    data = bytearray(wire(8, produce_body()))
    server = ServerConnection()
    server.receive_data(data)
    data[:] = b"\xff" * len(data)
    assert server.next_request().body == produce_body()


@pytest.mark.parametrize("size", [-1, -(2**31), 1025, 2**31 - 1])
def test_bad_size_prefix_fails_before_the_body_arrives(size):
    server = ServerConnection(max_frame_bytes=1024)
    server.receive_data(I32.pack(size))  # the body never comes
    with pytest.raises(FramingError):
        server.next_request()
    with pytest.raises(FramingError):  # and the connection stays failed
        server.next_request()


def test_frame_at_the_limit_is_accepted():
    data = wire(8, produce_body())
    assert parse_one(data, max_frame_bytes=len(data) - 4).error is None


def test_frame_too_short_for_a_header():
    with pytest.raises(FramingError):
        parse_one(I32.pack(5) + b"\x00" * 5)


# -- versions ------------------------------------------------------------------------------------


def test_unknown_api_key_means_close():
    request = parse_one(frame(999, 0, b""))
    assert request.error == ErrorCode.UNSUPPORTED_VERSION and request.spec is None
    assert error_response(request, request.error) is None
    with pytest.raises(EncodeError):
        ServerConnection().encode_response(request, object())


def test_advertised_but_not_served_version_is_answered_per_partition():
    request = parse_one(wire(2, produce_body(version=2)))
    assert request.error == ErrorCode.UNSUPPORTED_VERSION
    assert request.body == produce_body()
    body = error_response(request, request.error)
    errors = [p.error_code for t in body.responses for p in t.partition_responses]
    assert errors == [35, 35]
    client = ClientConnection()
    correlation_id, _ = client.send_request(0, 2, produce_body())
    assert correlation_id == request.correlation_id
    client.receive_data(join_chunks(ServerConnection().encode_response(request, body)))
    assert client.next_response() == (correlation_id, body)


def test_version_beyond_advertised_means_close():
    request = parse_one(frame(0, 11, b"\x00" * 20, flexible_header=True))
    assert request.error == ErrorCode.UNSUPPORTED_VERSION and request.body is None
    assert error_response(request, request.error) is None


def test_api_versions_v4_gets_the_v0_layout_with_the_api_list():
    """kafka-python opens with ApiVersions v4 (header v2, compact body with tags)."""
    body = b"\x0dkafka-python\x073.0.12\x00"
    request = parse_one(frame(18, 4, body, correlation_id=1, flexible_header=True))
    assert request.error == ErrorCode.UNSUPPORTED_VERSION
    assert request.header.client_id == "c"
    answer = error_response(request, request.error)
    data = join_chunks(ServerConnection().encode_response(request, answer))
    entries = [(s.key, *s.advertised) for s in API_BY_KEY.values()]
    expected = (struct.pack(">ihi", 1, 35, len(entries))
                + b"".join(struct.pack(">hhh", *e) for e in entries))  # fmt: skip
    assert data == I32.pack(len(expected)) + expected
    assert (18, 0, 3) in entries


def test_api_versions_v3_is_flexible_with_a_v0_response_header():
    client = ClientConnection(client_id="c")
    request_body = api_versions.ApiVersionsRequest(client_software_name="x",
                                                   client_software_version="1")  # fmt: skip
    _, data = client.send_request(18, 3, request_body)
    request = parse_one(data)
    assert request.error is None and request.body == request_body
    answer = error_response(request, ErrorCode.NONE)
    out = join_chunks(ServerConnection().encode_response(request, answer))
    assert out[4:8] == I32.pack(request.correlation_id)
    assert out[8:10] == b"\x00\x00"  # error code right after the correlation id: no header tags
    assert out[10] == len(API_BY_KEY) + 1  # compact array
    client.receive_data(out)
    assert client.next_response()[1] == answer


def test_acks_zero_expects_no_response():
    assert not parse_one(wire(8, produce_body(acks=0))).expects_response
    assert parse_one(wire(8, produce_body(acks=-1))).expects_response


# -- bodies that do not decode -------------------------------------------------------------------

GOOD = wire(8, produce_body())[4:]  # frame content without the size prefix
TOPICS_AT = 2 + 2 + 4 + 3 + 2 + 2 + 4  # key, version, corr, client_id "c", tx id, acks, timeout
assert GOOD[TOPICS_AT : TOPICS_AT + 4] == I32.pack(1)


def with_content(content: bytes) -> bytes:
    return I32.pack(len(content)) + content


HEAD = GOOD[:TOPICS_AT]
ONE_TOPIC = HEAD + I32.pack(1)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        pytest.param(GOOD[:-1], "runs past the end", id="truncated"),
        pytest.param(GOOD + b"\x00", "1 bytes after the body", id="trailing-byte"),
        pytest.param(HEAD + I32.pack(-5), "negative count", id="negative-count"),
        pytest.param(HEAD + I32.pack(2**31 - 1), "claims 2147483647 items", id="huge-count"),
        pytest.param(ONE_TOPIC + I16.pack(500) + b"t" * 9, "string of 500 bytes",
                     id="long-string"),
        pytest.param(ONE_TOPIC + I16.pack(-1) + I32.pack(0), "non-nullable string",
                     id="null-string"),
        pytest.param(ONE_TOPIC + b"\x00\x01\xff" + I32.pack(0), "not UTF-8", id="bad-utf8"),
        pytest.param(ONE_TOPIC + b"\x00\x01t" + I32.pack(1) + I32.pack(0) + I32.pack(2**30),
                     "bytes of 1073741824 bytes", id="records-beyond-frame"),
    ],
)  # fmt: skip
def test_undecodable_body_is_invalid_request(content, reason):
    request = parse_one(with_content(content))
    assert request.error == ErrorCode.INVALID_REQUEST
    assert request.body is None and reason in request.detail
    assert request.correlation_id == 0
    assert error_response(request, request.error) is None  # no top-level error code: close


def test_bad_client_id_is_invalid_request():
    request = parse_one(frame(3, 8, b"", client_id=b"\x00\x10ab"))
    assert request.error == ErrorCode.INVALID_REQUEST
    assert (request.api_key, request.api_version, request.correlation_id) == (3, 8, 7)


def test_malicious_count_allocates_nothing_big():
    content = HEAD + I32.pack(2**31 - 1) + b"\x00" * 64
    server = ServerConnection()
    server.receive_data(with_content(content))  # the receive arena is not the decoder's
    tracemalloc.start()
    try:
        request = server.next_request()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert request.error == ErrorCode.INVALID_REQUEST
    assert peak < 64 * 1024


def test_random_garbage_never_raises_anything_but_protocol_errors():
    @settings(derandomize=True, max_examples=300, deadline=None)
    @given(key=st.sampled_from(sorted(API_BY_KEY)), version=st.integers(0, 12),
           junk=st.binary(max_size=64))  # fmt: skip
    def run(key, version, junk):
        request = parse_one(frame(key, version, junk,
                                  flexible_header=API_BY_KEY[key].request.is_flexible(version)))
        assert request.error in (None, ErrorCode.INVALID_REQUEST, ErrorCode.UNSUPPORTED_VERSION)

    run()


# -- error responses for every API and version ---------------------------------------------------


def error_cases():
    for spec in API_BY_KEY.values():
        for version in spec.request.versions:
            yield pytest.param(spec, version, id=f"{spec.name}-v{version}")


def error_codes(obj, version: int) -> list[int]:
    """Every error code the response carries at ``version``."""
    found = []
    for field in getattr(obj, "fields", ()):
        if version not in field.versions:
            continue
        value = getattr(obj, field.name)
        if field.name == "error_code":
            found.append(value)
        for item in value if isinstance(value, list) else [value]:
            found += error_codes(item, version)
    return found


@pytest.mark.parametrize(("spec", "version"), list(error_cases()))
@settings(derandomize=True, max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(data=st.data())
def test_error_response_encodes_and_carries_the_code(spec, version, data):
    body = data.draw(message(spec.request, version))
    if spec.name == "Produce":
        body.acks = 1
    client = ClientConnection()
    correlation_id, wire_bytes = client.send_request(spec.key, version, body)
    request = parse_one(wire_bytes)
    for request_body in (request.body, None):
        request.body = request_body
        answer = error_response(request, ErrorCode.NOT_COORDINATOR)
        if answer is None:
            assert request_body is None  # only an undecoded body may leave us speechless
            continue
        assert set(error_codes(answer, version)) <= {16}
        top = next((f for f in type(answer).fields if f.name == "error_code"), None)
        if top is not None and version in top.versions:
            assert answer.error_code == 16
        chunks = ServerConnection().encode_response(request, answer)
        check = ClientConnection()
        check.send_request(spec.key, version, body, expect_response=True)
        check.receive_data(join_chunks(chunks))
        assert check.next_response()[1] == answer
