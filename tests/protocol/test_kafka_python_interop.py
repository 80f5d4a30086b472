"""Byte-for-byte agreement with an independent codec: kafka-python 3's JSON-driven protocol.

For every API, direction and declared version, a message we encode is decoded by kafka-python
and re-encoded by it to the very same bytes. A field we misplace, mistype or forget shows up as
a difference.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import message

from klog.protocol.apis import API_BY_KEY
from klog.protocol.chunks import ChunkWriter, join_chunks

kafka_protocol = pytest.importorskip("kafka.protocol")
api_message = pytest.importorskip("kafka.protocol.api_message")


def kafka_python_classes() -> dict[str, type]:
    found = {}
    for info in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        if ".old" in info.name or "generate_stubs" in info.name:
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, api_message.ApiMessage):
                json = getattr(value, "_json", None)
                if json:
                    found[json["name"]] = value
    return found


THEIRS = kafka_python_classes()


def cases():
    for spec in API_BY_KEY.values():
        for cls in (spec.request, spec.response):
            for version in cls.versions:
                yield pytest.param(cls, version, id=f"{cls.__name__}-v{version}")


@pytest.mark.parametrize(("cls", "version"), list(cases()))
@settings(derandomize=True, max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(data=st.data())
def test_kafka_python_reencodes_our_bytes_identically(cls, version, data):
    theirs = THEIRS[cls.__name__]
    ours = data.draw(message(cls, version))
    if cls.__name__ == "ApiVersionsResponse":
        ours.error_code = 0  # kafka-python reads any ApiVersions error in the v0 layout
    out = ChunkWriter(size_prefix=False)
    ours.encode_into(out, version)
    encoded = join_chunks(out.finish())
    decoded = theirs.decode(encoded, version=version)
    if decoded.is_request():
        decoded.with_header()  # kafka-python's DeleteTopicsRequest.encode needs one
        again = decoded.encode(version=version)
    else:
        again = decoded.encode()
    assert bytes(again) == encoded
