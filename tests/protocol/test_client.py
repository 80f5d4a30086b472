"""ClientConnection: correlation ids, the in-flight queue, acks=0 and the ApiVersions fallback."""

from __future__ import annotations

import struct

import pytest

from klog.protocol.apis import api_versions, heartbeat, produce
from klog.protocol.client import ClientConnection
from klog.protocol.exceptions import CorrelationError, FramingError
from klog.protocol.frames import NEED_DATA


def response(correlation_id: int, body: bytes) -> bytes:
    content = struct.pack(">i", correlation_id) + body
    return struct.pack(">i", len(content)) + content


HEARTBEAT_OK = struct.pack(">ih", 0, 0)  # v1+: throttle_time_ms, error_code


def send_heartbeat(client: ClientConnection) -> int:
    body = heartbeat.HeartbeatRequest(group_id="g", generation_id=1, member_id="m")
    return client.send_request(12, 3, body)[0]


def test_responses_match_requests_in_order():
    client = ClientConnection()
    ids = [send_heartbeat(client) for _ in range(3)]
    assert ids == [0, 1, 2] and client.in_flight == 3
    client.receive_data(b"".join(response(i, HEARTBEAT_OK) for i in ids))
    got = [client.next_response() for _ in ids]
    assert [g[0] for g in got] == ids
    assert got[0][1] == heartbeat.HeartbeatResponse(error_code=0)
    assert client.next_response() is NEED_DATA and client.in_flight == 0


def test_out_of_order_correlation_id_is_an_error():
    client = ClientConnection()
    send_heartbeat(client)
    send_heartbeat(client)
    client.receive_data(response(1, HEARTBEAT_OK))
    with pytest.raises(CorrelationError):
        client.next_response()


def test_response_with_nothing_in_flight_is_an_error():
    client = ClientConnection()
    client.receive_data(response(0, HEARTBEAT_OK))
    with pytest.raises(CorrelationError):
        client.next_response()


def test_acks_zero_produce_is_not_queued():
    client = ClientConnection()
    body = produce.ProduceRequest(acks=0, timeout_ms=1)
    client.send_request(0, 8, body)
    assert client.in_flight == 0
    client.send_request(0, 8, body, expect_response=True)
    assert client.in_flight == 1


def test_api_versions_error_is_read_in_the_v0_layout():
    client = ClientConnection()
    correlation_id, _ = client.send_request(18, 3, api_versions.ApiVersionsRequest())
    v0_body = struct.pack(">hi", 35, 1) + struct.pack(">hhh", 18, 0, 2)
    client.receive_data(response(correlation_id, v0_body))
    _, body = client.next_response()
    assert body.error_code == 35
    assert body.api_keys == [api_versions.ApiVersion(api_key=18, min_version=0, max_version=2)]


def test_oversized_response_frame_is_a_framing_error():
    client = ClientConnection(max_frame_bytes=100)
    send_heartbeat(client)
    client.receive_data(struct.pack(">i", 101))
    with pytest.raises(FramingError):
        client.next_response()


def test_correlation_ids_wrap_at_int32():
    client = ClientConnection()
    client._next_correlation_id = 2**31 - 1
    assert send_heartbeat(client) == 2**31 - 1
    assert send_heartbeat(client) == 0


def test_client_id_may_be_null():
    _, data = ClientConnection(client_id=None).send_request(
        12, 0, heartbeat.HeartbeatRequest(group_id="g", member_id="m"))
    assert data[12:14] == b"\xff\xff"
