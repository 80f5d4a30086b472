"""Hand-compiled codecs for Produce v9-10, the flexible versions current clients negotiate.

The same straight-pass idea as :mod:`klog.protocol.produce_codec` (v3-8; read its docstring
for why), in the flexible encoding: strings, arrays and records carry unsigned-varint lengths
plus one (0 is null), and every struct ends in a tagged-field section. The sections a Produce
carries are nearly always empty (one zero byte), and that is the only case handled here:

- a reader meeting a non-empty section (v10's KIP-951 CurrentLeader or NodeEndpoints, a newer
  peer's unknown tag) or anything else unusual (a short buffer, a null where none is allowed,
  a varint the one-byte path does not cover and the shared reader refuses, bad UTF-8) hands
  the whole body to the interpreted reader, which decodes it or raises its precise
  DecodeError;
- a writer meeting an answer that carries the KIP-951 hints (set only on
  NOT_LEADER_OR_FOLLOWER partitions, rare) or a bad value writes nothing and lets the
  interpreted writer write it or raise its EncodeError.

:func:`install` checks the declarations still have the layout written here (tags included)
before putting anything in the codec caches; ``tests/protocol/test_produce_codec.py`` checks
objects, bytes and errors against the interpreter.
"""

from __future__ import annotations

import struct
from typing import Any

from klog.protocol.codec import StructCodec, compile_struct
from klog.protocol.exceptions import DecodeError
from klog.protocol.fieldtypes import RECORDS
from klog.protocol.primitives import read_unsigned_varint

VERSIONS = range(9, 11)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_PARTITION = struct.Struct(">ihqqq")  # index, error_code, base_offset, append time, log start
# an answer partition's tail when all is well: no record errors, a null message, no tags
_PLAIN_TAIL = b"\x01\x00\x00"
# records as one buffer, or a batch's pieces in order (a producer's header and body apart)
_RECORD_TYPES = (bytes, bytearray, memoryview, tuple)

_REQUEST = (("transactional_id", "string", True, None), ("acks", "int16", False, None),
            ("timeout_ms", "int32", False, None),
            ("topic_data", "[]TopicProduceData", False, None))
_TOPIC_DATA = (("name", "string", False, None),
               ("partition_data", "[]PartitionProduceData", False, None))
_PARTITION_DATA = (("index", "int32", False, None), ("records", "records", True, None))
_RESPONSE = (("responses", "[]TopicProduceResponse", False, None),
             ("throttle_time_ms", "int32", False, None))
_TOPIC_RESPONSE = (("name", "string", False, None),
                   ("partition_responses", "[]PartitionProduceResponse", False, None))
_PARTITION_RESPONSE = (("index", "int32", False, None), ("error_code", "int16", False, None),
                       ("base_offset", "int64", False, None),
                       ("log_append_time_ms", "int64", False, None),
                       ("log_start_offset", "int64", False, None),
                       ("record_errors", "[]BatchIndexAndErrorMessage", False, None),
                       ("error_message", "string", True, None))
_CURRENT_LEADER = ("current_leader", "LeaderIdAndEpoch", False, 0)  # v10, KIP-951
_NODE_ENDPOINTS = ("node_endpoints", "[]NodeEndpoint", False, 0)  # v10, KIP-951


def layout(cls: Any, version: int) -> tuple:
    """A struct's fields at ``version``: (name, Kafka type, nullable, tag or None) each."""
    return tuple((f.name, f.type.kafka_name, f.is_nullable(version),
                  f.tag if f.is_tagged(version) else None)
                 for f in cls.fields if version in f.versions)


def check(request_cls: Any, topic_data_cls: Any, partition_data_cls: Any, response_cls: Any,
          topic_response_cls: Any, partition_response_cls: Any) -> bool:
    """True when v9-10 of the declarations are flexible with the layout written here."""
    for version in VERSIONS:
        hints = version >= 10
        expected = [
            (request_cls, _REQUEST), (topic_data_cls, _TOPIC_DATA),
            (partition_data_cls, _PARTITION_DATA),
            (response_cls, _RESPONSE + ((_NODE_ENDPOINTS,) if hints else ())),
            (topic_response_cls, _TOPIC_RESPONSE),
            (partition_response_cls, _PARTITION_RESPONSE + ((_CURRENT_LEADER,) if hints else ())),
        ]
        if (not request_cls.is_flexible(version) or not response_cls.is_flexible(version)
                or any(layout(cls, version) != want for cls, want in expected)):
            return False
    return True


def install(request_cls: Any, topic_data_cls: Any, partition_data_cls: Any, response_cls: Any,
            topic_response_cls: Any, partition_response_cls: Any) -> bool:
    """Put the hand-compiled v9-10 codecs in the classes' caches (after :func:`check`)."""
    if not check(request_cls, topic_data_cls, partition_data_cls, response_cls,
                 topic_response_cls, partition_response_cls):
        return False
    for version in VERSIONS:
        generic_request = compile_struct(request_cls, version, True)
        generic_response = compile_struct(response_cls, version, True)
        request_cls._codecs[(version, True)] = StructCodec(
            _request_reader(request_cls, topic_data_cls, partition_data_cls,
                            generic_request.read),
            _request_writer(version, generic_request.write), generic_request.min_bytes)
        response_cls._codecs[(version, True)] = StructCodec(
            _response_reader(version, response_cls, topic_response_cls, partition_response_cls,
                             generic_response.read),
            _response_writer(version, response_cls, partition_response_cls,
                             generic_response.write),
            generic_response.min_bytes)
    return True


def _new(cls: Any, values: dict) -> Any:
    obj = object.__new__(cls)
    obj.__dict__ = values
    return obj


class _Unusual(Exception):
    """A body the straight-line code leaves to the interpreted one."""


def _varint(buf: Any, pos: int) -> tuple[int, int]:
    """An unsigned varint of more than one byte, through the shared reader; its refusal is
    an oddity for the interpreted reader to report."""
    try:
        return read_unsigned_varint(buf, pos)
    except DecodeError:
        raise _Unusual from None


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_string(value: Any, nullable: bool) -> bytes:
    if value is None:
        if not nullable:
            raise _Unusual
        return b"\x00"
    data = value.encode("utf-8")
    return _uvarint(len(data) + 1) + data


_ODD = (_Unusual, struct.error, IndexError, UnicodeDecodeError)
_BAD_VALUE = (_Unusual, struct.error, TypeError, AttributeError, ValueError, OverflowError,
              UnicodeError)


# -- the request: read by the broker, written by the client ---------------------------------


def _request_reader(request_cls: Any, topic_cls: Any, partition_cls: Any, generic: Any) -> Any:
    unpack_acks, unpack_i32 = _ACKS_TIMEOUT.unpack_from, _I32.unpack_from

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        start = pos
        try:
            n = buf[pos]
            n, pos = (n, pos + 1) if n < 0x80 else _varint(buf, pos)
            if n:
                end = pos + n - 1
                if end > len(buf):
                    raise _Unusual
                transactional_id: str | None = str(buf[pos:end], "utf-8")
                pos = end
            else:
                transactional_id = None
            acks, timeout_ms = unpack_acks(buf, pos)
            pos += 6
            count = buf[pos]
            count, pos = (count, pos + 1) if count < 0x80 else _varint(buf, pos)
            if not count:
                raise _Unusual  # a null array where none is allowed
            topics = []
            for _ in range(count - 1):
                n = buf[pos]
                n, pos = (n, pos + 1) if n < 0x80 else _varint(buf, pos)
                end = pos + n - 1
                if not n or end > len(buf):
                    raise _Unusual
                name = str(buf[pos:end], "utf-8")
                pos = end
                parts_count = buf[pos]
                parts_count, pos = ((parts_count, pos + 1) if parts_count < 0x80
                                    else _varint(buf, pos))
                if not parts_count:
                    raise _Unusual
                parts = []
                for _ in range(parts_count - 1):
                    index = unpack_i32(buf, pos)[0]
                    n = buf[pos + 4]
                    n, pos = (n, pos + 5) if n < 0x80 else _varint(buf, pos + 4)
                    if n:
                        end = pos + n - 1
                        if end > len(buf):
                            raise _Unusual
                        records: Any = buf[pos:end]
                        pos = end
                    else:
                        records = None
                    if buf[pos]:
                        raise _Unusual  # tagged fields
                    pos += 1
                    parts.append(_new(partition_cls, {"index": index, "records": records}))
                if buf[pos]:
                    raise _Unusual
                pos += 1
                topics.append(_new(topic_cls, {"name": name, "partition_data": parts}))
            if buf[pos]:
                raise _Unusual
            pos += 1
        except _ODD:
            return generic(buf, start)
        return _new(request_cls, {"transactional_id": transactional_id, "acks": acks,
                                  "timeout_ms": timeout_ms, "topic_data": topics}), pos

    return read


def _request_writer(version: int, generic: Any) -> Any:
    pack_i32, pack_acks = _I32.pack, _ACKS_TIMEOUT.pack
    write_records = RECORDS.writer(version, True, True)

    def write(out: bytearray, obj: Any) -> None:
        # Every field is packed first (a bad value leaves it all to the interpreted writer,
        # with nothing written yet); then the pieces go out, records through the shared
        # writer, which passes large ones through a ChunkWriter uncopied.
        try:
            head = bytearray(_compact_string(obj.transactional_id, True))
            head += pack_acks(obj.acks, obj.timeout_ms)
            topics = obj.topic_data
            head += _uvarint(len(topics) + 1)
            pieces: list = [head]
            for topic in topics:
                head += _compact_string(topic.name, False)
                parts = topic.partition_data
                head += _uvarint(len(parts) + 1)
                for part in parts:
                    head += pack_i32(part.index)
                    records = part.records
                    if records is None:
                        head += b"\x00\x00"  # null records, no tags
                        continue
                    if type(records) not in _RECORD_TYPES:
                        raise _Unusual
                    pieces.append(records)
                    head = bytearray(b"\x00")  # the partition's tags
                    pieces.append(head)
                head.append(0)  # the topic's tags
            head.append(0)  # the request's tags
        except _BAD_VALUE:
            generic(out, obj)
            return
        for i, piece in enumerate(pieces):
            if i % 2:
                write_records(out, piece)
            else:
                out += piece

    return write


# -- the response: written by the broker, read by the client --------------------------------


def _response_writer(version: int, response_cls: Any, partition_cls: Any, generic: Any) -> Any:
    pack_i32, pack_partition = _I32.pack, _PARTITION.pack
    hints = version >= 10
    no_leader = _default(partition_cls, "current_leader") if hints else None
    no_endpoints = _default(response_cls, "node_endpoints") if hints else None

    def write(out: bytearray, obj: Any) -> None:
        try:
            if hints and obj.node_endpoints != no_endpoints:
                raise _Unusual  # KIP-951 hints: the interpreter writes them
            body = bytearray(_uvarint(len(obj.responses) + 1))
            for topic in obj.responses:
                body += _compact_string(topic.name, False)
                parts = topic.partition_responses
                body += _uvarint(len(parts) + 1)
                for part in parts:
                    body += pack_partition(part.index, part.error_code, part.base_offset,
                                           part.log_append_time_ms, part.log_start_offset)
                    if part.record_errors is None or len(part.record_errors):
                        raise _Unusual  # record errors are rare, the interpreter has them
                    if hints and part.current_leader != no_leader:
                        raise _Unusual
                    message = part.error_message
                    if message is None:
                        body += _PLAIN_TAIL
                    else:
                        body += b"\x01"
                        body += _compact_string(message, True)
                        body.append(0)
                body.append(0)
            body += pack_i32(obj.throttle_time_ms)
            body.append(0)
        except _BAD_VALUE:
            generic(out, obj)
            return
        out += body

    return write


def _default(cls: Any, name: str) -> Any:
    return next(f for f in cls.fields if f.name == name).default()


def _later_defaults(cls: Any, read: set[str]) -> dict[str, Any]:
    """The defaults of a struct's fields these readers do not fill (each made once)."""
    return {f.name: f.default() for f in cls.fields if f.name not in read}


def _response_reader(version: int, response_cls: Any, topic_cls: Any, partition_cls: Any,
                     generic: Any) -> Any:
    unpack_i32, unpack_partition = _I32.unpack_from, _PARTITION.unpack_from
    partition_size = _PARTITION.size
    names = tuple(name for name, _, _, _ in _PARTITION_RESPONSE[:5])
    # tagged fields (v10's KIP-951 hints) absent: their defaults, shared, never mutated
    absent = _later_defaults(partition_cls, {*names, "record_errors", "error_message"})
    response_absent = _later_defaults(response_cls, {"responses", "throttle_time_ms"})

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        start = pos
        try:
            count = buf[pos]
            count, pos = (count, pos + 1) if count < 0x80 else _varint(buf, pos)
            if not count:
                raise _Unusual
            topics = []
            for _ in range(count - 1):
                n = buf[pos]
                n, pos = (n, pos + 1) if n < 0x80 else _varint(buf, pos)
                end = pos + n - 1
                if not n or end > len(buf):
                    raise _Unusual
                name = str(buf[pos:end], "utf-8")
                pos = end
                parts_count = buf[pos]
                parts_count, pos = ((parts_count, pos + 1) if parts_count < 0x80
                                    else _varint(buf, pos))
                if not parts_count:
                    raise _Unusual
                parts = []
                for _ in range(parts_count - 1):
                    values = dict(zip(names, unpack_partition(buf, pos)))
                    pos += partition_size
                    if buf[pos] != 1:
                        raise _Unusual  # record errors (or a null array)
                    n = buf[pos + 1]
                    pos += 2
                    if n:
                        if n >= 0x80:
                            n, pos = _varint(buf, pos - 1)
                        end = pos + n - 1
                        if end > len(buf):
                            raise _Unusual
                        values["error_message"] = str(buf[pos:end], "utf-8")
                        pos = end
                    else:
                        values["error_message"] = None
                    if buf[pos]:
                        raise _Unusual  # tagged fields: KIP-951's current leader, or newer
                    pos += 1
                    values["record_errors"] = []
                    if absent:
                        values.update(absent)
                    parts.append(_new(partition_cls, values))
                if buf[pos]:
                    raise _Unusual
                pos += 1
                topics.append(_new(topic_cls, {"name": name, "partition_responses": parts}))
            throttle_time_ms = unpack_i32(buf, pos)[0]
            if buf[pos + 4]:
                raise _Unusual  # KIP-951's node endpoints, or newer tags
            pos += 5
        except _ODD:
            return generic(buf, start)
        return _new(response_cls, {"responses": topics, "throttle_time_ms": throttle_time_ms,
                                   **{k: list(v) if isinstance(v, list) else v
                                      for k, v in response_absent.items()}}), pos

    return read
