"""Request and response headers, and which header version goes with which (api, version).

Request header v1: ``api_key int16, api_version int16, correlation_id int32, client_id
nullable string``. v2 (flexible requests) appends a tagged-field section, but ``client_id``
stays a classic int16-length string, so a broker can read the key, version, correlation id and
client id of *any* request before it knows whether it supports that version.

Response header v0: ``correlation_id int32``; v1 (flexible responses) appends tagged fields.
ApiVersions responses always use v0, even when flexible, so a client that guessed a version too
new can still read the answer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from klog.protocol.apis import API_BY_KEY
from klog.protocol.exceptions import DecodeError
from klog.protocol.primitives import (
    INT32,
    read_nullable_string,
    skip_tagged_fields,
    write_empty_tagged_fields,
    write_nullable_string,
)

#: api_key int16, api_version int16, correlation_id int32: the part every request header has.
REQUEST_HEADER_FIXED = struct.Struct(">hhi")
API_VERSIONS_KEY = 18


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


def _flexible(api_key: int, api_version: int) -> bool:
    spec = API_BY_KEY.get(api_key)
    return spec is not None and spec.request.is_flexible(api_version)


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible requests, else 1 (v0, without client_id, is only for an API we lack).
    An unknown api key gets 1: we will not read past its client id anyway."""
    return 2 if _flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible responses, else 0; ApiVersions is always 0."""
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if _flexible(api_key, api_version) else 0


def read_request_header(buf: Any) -> tuple[RequestHeader, int]:
    """Parse a request header at the start of ``buf``. Raises DecodeError."""
    try:
        api_key, api_version, correlation_id = REQUEST_HEADER_FIXED.unpack_from(buf, 0)
    except struct.error:
        raise DecodeError(f"request header needs 8 bytes, frame has {len(buf)}") from None
    client_id, pos = read_nullable_string(buf, REQUEST_HEADER_FIXED.size)
    if request_header_version(api_key, api_version) >= 2:
        pos = skip_tagged_fields(buf, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def write_request_header(out: bytearray, header: RequestHeader) -> None:
    out += REQUEST_HEADER_FIXED.pack(header.api_key, header.api_version, header.correlation_id)
    write_nullable_string(out, header.client_id)
    if request_header_version(header.api_key, header.api_version) >= 2:
        write_empty_tagged_fields(out)


def read_response_header(buf: Any, header_version: int) -> tuple[int, int]:
    """``(correlation_id, body position)``. Raises DecodeError."""
    try:
        correlation_id = INT32.unpack_from(buf, 0)[0]
    except struct.error:
        raise DecodeError(f"response header needs 4 bytes, frame has {len(buf)}") from None
    pos = 4 if header_version < 1 else skip_tagged_fields(buf, 4)
    return correlation_id, pos


def write_response_header(out: bytearray, correlation_id: int, header_version: int) -> None:
    out += INT32.pack(correlation_id)
    if header_version >= 1:
        write_empty_tagged_fields(out)
