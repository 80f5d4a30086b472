"""Our declarations against Kafka's own schema files (../shared/kafka-protocol/*.json).

For every API, for request and response, for every version we declare: the same fields in the
same order, with the same snake_case names, types, nullability, tags and explicit defaults; the
same first flexible version; the same api key. The JSON is read at test time, never copied.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from klog.protocol import headers
from klog.protocol.apis import API_BY_KEY
from klog.protocol.schema import StructType

KAFKA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "kafka-protocol"

SPECS = list(API_BY_KEY.values())


def _kafka_python_resources() -> Path | None:
    """kafka-python ships Kafka's own schema files too: the source for the few APIs that
    ../shared does not hold (DeleteGroups)."""
    try:
        import kafka.protocol
    except ImportError:
        return None
    return Path(kafka.protocol.__file__).parent / "schemas" / "resources"


def load(name: str) -> dict:
    path = KAFKA_DIR / f"{name}.json"
    if not path.exists() and (bundled := _kafka_python_resources()) is not None:
        path = bundled / f"{name}.json"
    if not path.exists():
        pytest.skip(f"no Kafka schema file for {name} (in {KAFKA_DIR} or kafka-python)")
    text = "\n".join(line for line in path.read_text().splitlines()
                     if not line.lstrip().startswith("//"))  # fmt: skip
    return json.loads(text)


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def versions(spec: str | None) -> range:
    if spec is None or spec == "none":
        return range(0)
    if spec.endswith("+"):
        return range(int(spec[:-1]), 0x7FFF)
    low, _, high = spec.partition("-")
    return range(int(low), int(high or low) + 1)


def first_flexible(spec: str) -> int | None:
    return None if spec == "none" else int(spec.rstrip("+"))


def parse_default(field: dict):
    raw = field["default"]
    if not isinstance(raw, str):
        return raw
    if raw == "null":
        return None
    if raw in ("true", "false"):
        return raw == "true"
    if field["type"] in ("string",):
        return raw
    return int(raw, 0)


def kafka_fields(fields: list[dict], version: int, flexible: bool, common: dict) -> list:
    out = []
    for f in fields:
        tagged = flexible and "tag" in f and version in versions(f.get("taggedVersions"))
        if version not in versions(f["versions"]) and not tagged:
            continue
        children = f.get("fields") or common.get(f["type"].removeprefix("[]"))
        out.append((
            snake(f["name"]),
            f["type"],
            version in versions(f.get("nullableVersions")),
            f["tag"] if tagged else None,
            parse_default(f) if "default" in f else "<none>",
            kafka_fields(children, version, flexible, common) if children else None,
        ))  # fmt: skip
    return out


def our_fields(cls, version: int, flexible: bool, json_fields: list) -> list:
    defaults = {name: d for name, _, _, _, d, _ in json_fields}
    out = []
    for f in cls.fields:
        tagged = flexible and f.is_tagged(version)
        if version not in f.versions and not tagged:
            continue
        item = getattr(f.type, "item", f.type)
        children = None
        if isinstance(item, StructType):
            kids = next((c for n, *_, c in json_fields if n == f.name), None) or []
            children = our_fields(item.cls, version, flexible, kids)
        default = f.default() if defaults.get(f.name, "<none>") != "<none>" else "<none>"
        out.append((f.name, f.type.kafka_name, f.is_nullable(version),
                    f.tag if tagged else None, default, children))  # fmt: skip
    return out


def message_cases():
    for spec in SPECS:
        for cls in (spec.request, spec.response):
            yield pytest.param(spec, cls, id=cls.__name__)


@pytest.mark.parametrize(("spec", "cls"), list(message_cases()))
def test_declaration_matches_kafka(spec, cls):
    schema = load(cls.__name__)
    assert schema["apiKey"] == spec.key
    assert cls.first_flexible == first_flexible(schema["flexibleVersions"])
    valid = versions(schema["validVersions"])
    common = {s["name"]: s["fields"] for s in schema.get("commonStructs", [])}
    for version in cls.versions:
        assert version in valid
        flexible = cls.is_flexible(version)
        expected = kafka_fields(schema["fields"], version, flexible, common)
        assert our_fields(cls, version, flexible, expected) == expected, f"v{version}"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_header_versions_follow_flexibility(spec):
    request_flex = first_flexible(load(spec.request.__name__)["flexibleVersions"])
    for version in range(spec.advertised[0], spec.advertised[1] + 2):
        flexible = request_flex is not None and version >= request_flex
        assert headers.request_header_version(spec.key, version) == (2 if flexible else 1)
        expected = 0 if spec.name == "ApiVersions" else (1 if flexible else 0)
        assert headers.response_header_version(spec.key, version) == expected


def test_request_header_layout_matches_kafka():
    """Write a v1 and a v2 header with ours, read it back field by field as the JSON says."""
    schema = load("RequestHeader")
    names = [snake(f["name"]) for f in schema["fields"]]
    assert names == ["request_api_key", "request_api_version", "correlation_id", "client_id"]
    assert [f["type"] for f in schema["fields"]] == ["int16", "int16", "int32", "string"]
    client_id = schema["fields"][3]
    assert client_id["flexibleVersions"] == "none" and client_id["nullableVersions"] == "1+"
    assert headers.REQUEST_HEADER_FIXED.format == ">hhi"
    for api_key, version, tail in ((0, 8, b""), (18, 3, b"\x00")):
        out = bytearray()
        header = headers.RequestHeader(api_key, version, 7, "ab")
        headers.write_request_header(out, header)
        fixed = headers.REQUEST_HEADER_FIXED.pack(api_key, version, 7)
        assert bytes(out) == fixed + b"\x00\x02ab" + tail
        assert headers.read_request_header(bytes(out)) == (header, len(out))


def test_response_header_layout_matches_kafka():
    schema = load("ResponseHeader")
    fields = [(snake(f["name"]), f["type"]) for f in schema["fields"]]
    assert fields == [("correlation_id", "int32")]
    assert first_flexible(schema["flexibleVersions"]) == 1
    for header_version, expected in ((0, b"\x00\x00\x00\x09"), (1, b"\x00\x00\x00\x09\x00")):
        out = bytearray()
        headers.write_response_header(out, 9, header_version)
        assert bytes(out) == expected
