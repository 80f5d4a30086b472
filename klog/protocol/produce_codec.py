"""Hand-compiled codecs for Produce v3-10, the one request every message travels in.

The interpreted codec (:mod:`klog.protocol.codec`) walks prepared steps: a Produce request of
one partition costs it some forty Python calls to read and as many to write, and the response
as much again; measured (callgrind, issue 14) that was 96k instructions to read a request and
95k to build and write its answer, about 40% of a worker's CPU per acks=1 request. These
functions do the same work in one straight pass of precompiled ``struct.Struct`` unpacks and
packs, for the versions every current client sends (3-8: transactional ids, no tagged
fields; 9-10, flexible: compact lengths and tagged-field sections, see
:mod:`klog.protocol.produce_flex`), and produce the same objects and the same bytes.

The interpreted codec stays the reference:

- :func:`install` puts these functions in the messages' codec caches only after checking
  that the declarations in ``apis/produce.py`` still have the field layout written here, so
  a changed declaration falls back to the interpreter instead of decoding wrongly;
- a reader that meets anything unusual (a short buffer, a negative count or length where
  none is allowed, bad UTF-8) hands the whole body to the interpreted reader, which raises
  the precise DecodeError (or decodes it, if it is valid after all); a writer that meets a
  bad value writes nothing itself and lets the interpreted writer raise the EncodeError;
- ``tests/protocol/test_produce_codec.py`` checks both give identical objects, bytes and
  errors, for generated bodies and odd inputs.
"""

from __future__ import annotations

import struct
from typing import Any

from klog.protocol import produce_flex
from klog.protocol.codec import StructCodec, compile_struct
from klog.protocol.fieldtypes import RECORDS

VERSIONS = range(3, 9)  # non-flexible versions with a transactional id; v9+ is flexible

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_INDEX_LENGTH = struct.Struct(">ii")  # a partition's index and its records' length
_NULL_STRING = _I16.pack(-1)
_NULL_RECORDS = _I32.pack(-1)
_NO_RECORD_ERRORS = _I32.pack(0)
_RECORD_TYPES = (bytes, bytearray, memoryview)  # one piece; lists go to the interpreter
# PartitionProduceResponse up to error_message, by version (record_errors is v8+)
_PARTITION_V3 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_PARTITION_V5 = struct.Struct(">ihqqq")  # + log_start_offset

# The layouts these functions read and write, per struct: (field, Kafka type, nullable), as
# the declarations must give them at a version for install() to proceed.
REQUEST_LAYOUT = {
    "ProduceRequest": (("transactional_id", "string", True), ("acks", "int16", False),
                       ("timeout_ms", "int32", False),
                       ("topic_data", "[]TopicProduceData", False)),
    "TopicProduceData": (("name", "string", False),
                         ("partition_data", "[]PartitionProduceData", False)),
    "PartitionProduceData": (("index", "int32", False), ("records", "records", True)),
}
_PARTITION_RESPONSE = (("index", "int32", False), ("error_code", "int16", False),
                       ("base_offset", "int64", False), ("log_append_time_ms", "int64", False),
                       ("log_start_offset", "int64", False),
                       ("record_errors", "[]BatchIndexAndErrorMessage", False),
                       ("error_message", "string", True))
RESPONSE_LAYOUT = {
    "ProduceResponse": (("responses", "[]TopicProduceResponse", False),
                        ("throttle_time_ms", "int32", False)),
    "TopicProduceResponse": (("name", "string", False),
                             ("partition_responses", "[]PartitionProduceResponse", False)),
}


def _partition_response_layout(version: int) -> tuple:
    """v3-4 end at log_append_time_ms, v5-7 at log_start_offset; v8 adds the error fields."""
    return _PARTITION_RESPONSE[:7 if version >= 8 else 5 if version >= 5 else 4]


def install(request_cls: Any, topic_data_cls: Any, partition_data_cls: Any,
            response_cls: Any, topic_response_cls: Any, partition_response_cls: Any) -> bool:
    """Put the hand-compiled codecs of v3-8 in the classes' caches; False (nothing
    installed) when a declaration no longer has the layout these functions read."""
    expected = [(request_cls, REQUEST_LAYOUT["ProduceRequest"]),
                (topic_data_cls, REQUEST_LAYOUT["TopicProduceData"]),
                (partition_data_cls, REQUEST_LAYOUT["PartitionProduceData"]),
                (response_cls, RESPONSE_LAYOUT["ProduceResponse"]),
                (topic_response_cls, RESPONSE_LAYOUT["TopicProduceResponse"])]
    for version in VERSIONS:
        checks = [*expected, (partition_response_cls, _partition_response_layout(version))]
        if (request_cls.is_flexible(version) or response_cls.is_flexible(version)
                or any(layout(cls, version) != want for cls, want in checks)):
            return False
    if not produce_flex.check(request_cls, topic_data_cls, partition_data_cls, response_cls,
                              topic_response_cls, partition_response_cls):
        return False
    for version in VERSIONS:
        generic_request = compile_struct(request_cls, version, False)
        generic_response = compile_struct(response_cls, version, False)
        request_cls._codecs[(version, False)] = StructCodec(
            _request_reader(request_cls, topic_data_cls, partition_data_cls,
                            generic_request.read),
            _request_writer(generic_request.write), generic_request.min_bytes)
        response_cls._codecs[(version, False)] = StructCodec(
            _response_reader(version, response_cls, topic_response_cls, partition_response_cls,
                             generic_response.read),
            _response_writer(version, generic_response.write), generic_response.min_bytes)
    produce_flex.install(request_cls, topic_data_cls, partition_data_cls, response_cls,
                         topic_response_cls, partition_response_cls)
    return True


def layout(cls: Any, version: int) -> tuple:
    """A struct's fields at ``version``: (name, Kafka type, nullable) each."""
    return tuple((f.name, f.type.kafka_name, f.is_nullable(version))
                 for f in cls.fields if version in f.versions)


def _new(cls: Any, values: dict) -> Any:
    obj = object.__new__(cls)
    obj.__dict__ = values
    return obj


# -- the request: read by the broker, written by the client ---------------------------------


def _request_reader(request_cls: Any, topic_cls: Any, partition_cls: Any, generic: Any) -> Any:
    unpack_i16, unpack_i32 = _I16.unpack_from, _I32.unpack_from
    unpack_acks, unpack_partition = _ACKS_TIMEOUT.unpack_from, _INDEX_LENGTH.unpack_from

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        start = pos
        try:
            n = unpack_i16(buf, pos)[0]
            pos += 2
            if n >= 0:
                end = pos + n
                if end > len(buf):
                    return generic(buf, start)
                transactional_id: str | None = str(buf[pos:end], "utf-8")
                pos = end
            elif n == -1:
                transactional_id = None
            else:
                return generic(buf, start)
            acks, timeout_ms = unpack_acks(buf, pos)
            count = unpack_i32(buf, pos + 6)[0]
            pos += 10
            if count < 0:
                return generic(buf, start)
            topics = []
            for _ in range(count):
                n = unpack_i16(buf, pos)[0]
                end = pos + 2 + n
                if n < 0 or end > len(buf):
                    return generic(buf, start)
                name = str(buf[pos + 2:end], "utf-8")
                parts_count = unpack_i32(buf, end)[0]
                pos = end + 4
                if parts_count < 0:
                    return generic(buf, start)
                parts = []
                for _ in range(parts_count):
                    index, length = unpack_partition(buf, pos)
                    pos += 8
                    if length >= 0:
                        end = pos + length
                        if end > len(buf):
                            return generic(buf, start)
                        parts.append(_new(partition_cls, {"index": index,
                                                          "records": buf[pos:end]}))
                        pos = end
                    elif length == -1:
                        parts.append(_new(partition_cls, {"index": index, "records": None}))
                    else:
                        return generic(buf, start)
                topics.append(_new(topic_cls, {"name": name, "partition_data": parts}))
        except (struct.error, UnicodeDecodeError):
            return generic(buf, start)
        return _new(request_cls, {"transactional_id": transactional_id, "acks": acks,
                                  "timeout_ms": timeout_ms, "topic_data": topics}), pos

    return read


def _request_writer(generic: Any) -> Any:
    pack_i32, pack_acks = _I32.pack, _ACKS_TIMEOUT.pack
    write_records = RECORDS.writer(3, False, True)

    def write(out: bytearray, obj: Any) -> None:
        # First every field is packed (a bad value leaves it all to the interpreted writer,
        # with nothing written yet); then the pieces go out, records through the shared
        # writer, which passes large ones through a ChunkWriter uncopied.
        try:
            head = bytearray(_string(obj.transactional_id, True))
            head += pack_acks(obj.acks, obj.timeout_ms)
            topics = obj.topic_data
            head += pack_i32(len(topics))
            pieces: list = [head]
            for topic in topics:
                head += _string(topic.name, False)
                parts = topic.partition_data
                head += pack_i32(len(parts))
                for part in parts:
                    head += pack_i32(part.index)
                    records = part.records
                    if records is None:
                        head += _NULL_RECORDS
                        continue
                    if type(records) not in _RECORD_TYPES:
                        raise _Unusual
                    pieces.append(records)
                    head = bytearray()
                    pieces.append(head)
        except (_Unusual, struct.error, TypeError, AttributeError, ValueError, OverflowError,
                UnicodeError):
            generic(out, obj)
            return
        for i, piece in enumerate(pieces):
            if i % 2:
                write_records(out, piece)
            else:
                out += piece

    return write


class _Unusual(Exception):
    """A body the straight-line writer leaves to the interpreted one."""


def _string(value: Any, nullable: bool) -> bytes:
    if value is None:
        if not nullable:
            raise _Unusual
        return _NULL_STRING
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise _Unusual
    return _I16.pack(len(data)) + data


# -- the response: written by the broker, read by the client --------------------------------


def _response_writer(version: int, generic: Any) -> Any:
    pack_i32 = _I32.pack
    partition = _PARTITION_V5 if version >= 5 else _PARTITION_V3
    pack_partition = partition.pack
    flexible_tail = version >= 8

    def write(out: bytearray, obj: Any) -> None:
        try:
            body = bytearray(pack_i32(len(obj.responses)))
            for topic in obj.responses:
                body += _string(topic.name, False)
                parts = topic.partition_responses
                body += pack_i32(len(parts))
                for part in parts:
                    if version >= 5:
                        body += pack_partition(part.index, part.error_code, part.base_offset,
                                               part.log_append_time_ms, part.log_start_offset)
                    else:
                        body += pack_partition(part.index, part.error_code, part.base_offset,
                                               part.log_append_time_ms)
                    if flexible_tail:  # v8: record errors are rare, the interpreter has them
                        if part.record_errors is None or len(part.record_errors):
                            raise _Unusual
                        body += _NO_RECORD_ERRORS
                        body += _string(part.error_message, True)
            body += pack_i32(obj.throttle_time_ms)
        except (_Unusual, struct.error, TypeError, AttributeError, ValueError,
                OverflowError, UnicodeError):
            generic(out, obj)
            return
        out += body

    return write


def _later_defaults(cls: Any, read: set[str]) -> dict[str, Any]:
    """The defaults of a struct's fields that v3-8 do not carry (each made once)."""
    return {f.name: f.default() for f in cls.fields if f.name not in read}


def _response_reader(version: int, response_cls: Any, topic_cls: Any, partition_cls: Any,
                     generic: Any) -> Any:
    unpack_i16, unpack_i32 = _I16.unpack_from, _I32.unpack_from
    partition = _PARTITION_V5 if version >= 5 else _PARTITION_V3
    unpack_partition, partition_size = partition.unpack_from, partition.size
    names = tuple(name for name, _, _ in _partition_response_layout(version)[:5])
    absent = {} if version >= 5 else {"log_start_offset": -1}
    # fields of later versions (v10's KIP-951 hints) at their defaults, shared: never mutated
    read_here = {*names, "log_start_offset", "record_errors", "error_message"}
    absent.update(_later_defaults(partition_cls, read_here))
    response_absent = _later_defaults(response_cls, {"responses", "throttle_time_ms"})
    flexible_tail = version >= 8

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        start = pos
        try:
            count = unpack_i32(buf, pos)[0]
            pos += 4
            if count < 0:
                return generic(buf, start)
            topics = []
            for _ in range(count):
                n = unpack_i16(buf, pos)[0]
                end = pos + 2 + n
                if n < 0 or end > len(buf):
                    return generic(buf, start)
                name = str(buf[pos + 2:end], "utf-8")
                parts_count = unpack_i32(buf, end)[0]
                pos = end + 4
                if parts_count < 0:
                    return generic(buf, start)
                parts = []
                for _ in range(parts_count):
                    values = dict(zip(names, unpack_partition(buf, pos)))
                    pos += partition_size
                    if absent:
                        values.update(absent)
                    if flexible_tail:
                        errors = unpack_i32(buf, pos)[0]
                        n = unpack_i16(buf, pos + 4)[0]
                        pos += 6
                        if errors != 0 or n < -1:
                            return generic(buf, start)
                        values["record_errors"] = []
                        if n == -1:
                            values["error_message"] = None
                        else:
                            end = pos + n
                            if end > len(buf):
                                return generic(buf, start)
                            values["error_message"] = str(buf[pos:end], "utf-8")
                            pos = end
                    else:
                        values["record_errors"] = []
                        values["error_message"] = None
                    parts.append(_new(partition_cls, values))
                topics.append(_new(topic_cls, {"name": name, "partition_responses": parts}))
            throttle_time_ms = unpack_i32(buf, pos)[0]
            pos += 4
        except (struct.error, UnicodeDecodeError):
            return generic(buf, start)
        return _new(response_cls, {"responses": topics, "throttle_time_ms": throttle_time_ms,
                                   **{k: list(v) if isinstance(v, list) else v
                                      for k, v in response_absent.items()}}), pos

    return read
