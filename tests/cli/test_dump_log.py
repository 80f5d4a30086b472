"""`klog dump-log`: segment files written here, with every codec, damage and preallocation."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from klog.protocol.records import CONTROL_ABORT, build_batch, control_record
from klog_cli import dump_log

REPO = Path(__file__).resolve().parents[2]
BASE_TS = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def segment_bytes() -> bytes:
    """Five batches, one per codec, of 3 records each, then an aborted-transaction marker."""
    out = bytearray()
    for codec in range(5):
        records = [
            (
                BASE_TS + i,
                b"key-%d" % i if i % 2 else None,
                f"café {i}".encode(),
                [("trace", b"\x00\xff"), ("empty", None)] if i == 0 else None,
            )
            for i in range(3)
        ]
        out += build_batch(
            records,
            codec=codec,
            base_offset=3 * codec,
            producer_id=7,
            producer_epoch=1,
            base_sequence=3 * codec,
        )
    key, value = control_record(CONTROL_ABORT)
    out += build_batch(
        [(BASE_TS + 9, key, value, None)],
        base_offset=15,
        is_control=True,
        is_transactional=True,
        producer_id=7,
        producer_epoch=1,
    )
    return bytes(out)


SEGMENT = segment_bytes()
POSITIONS = [0]  # where each batch starts
for _ in range(5):
    POSITIONS.append(POSITIONS[-1] + int.from_bytes(SEGMENT[POSITIONS[-1] + 8 :][:4], "big") + 12)


def dump(path: Path, *flags: str, capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    dump_log.add_arguments(parser)
    status = dump_log.run(parser.parse_args([str(path), *flags]))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def segment(tmp_path) -> Path:
    path = tmp_path / "orders-0" / "00000000000000000000.log"
    path.parent.mkdir()
    path.write_bytes(SEGMENT)
    return path


def test_batches_in_kafka_style_lines(segment, capsys):
    status, out, err = dump(segment, capsys=capsys)
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {segment}", "Starting offset: 0"]
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batches) == 6
    for codec, line in enumerate(batches[:5]):
        assert f"baseOffset: {3 * codec} lastOffset: {3 * codec + 2} count: 3 " in line
        assert f"baseSequence: {3 * codec} lastSequence: {3 * codec + 2} " in line
        assert "producerId: 7 producerEpoch: 1 " in line
        assert f"position: {POSITIONS[codec]} " in line
        assert f"baseTimestamp: {BASE_TS} CreateTime: {BASE_TS + 2} " in line
        assert f"compresscodec: {CODECS[codec]} " in line and line.endswith("isvalid: true")
    assert "isTransactional: true isControl: true" in batches[5]
    assert lines[-1] == f"6 batches, 16 records in bytes 0..{len(SEGMENT)} of {len(SEGMENT)}"
    assert not any(line.startswith("|") for line in lines)


def test_records_of_every_codec(segment, capsys):
    status, out, _ = dump(segment, "--records", capsys=capsys)
    assert status == 0
    records = [line for line in out.splitlines() if line.startswith("| ")]
    assert len(records) == 16
    for codec in range(5):
        first, second = records[3 * codec], records[3 * codec + 1]
        assert first == (
            f"| offset: {3 * codec} CreateTime: {BASE_TS} headers: [trace=b'\\x00\\xff', "
            "empty=null] key: null payload: café 0"
        )
        assert second.endswith("headers: [] key: key-1 payload: café 1")
    assert records[15] == f"| offset: 15 CreateTime: {BASE_TS + 9} headers: [] endTxnMarker: ABORT"


def test_json_one_object_per_batch(segment, capsys):
    status, out, _ = dump(segment, "--json", "--records", capsys=capsys)
    assert status == 0
    batches = [orjson.loads(line) for line in out.splitlines()]
    assert [b["codec"] for b in batches] == [*CODECS, "none"]
    assert [b["position"] for b in batches] == POSITIONS
    first = batches[0]
    assert first["crc_valid"] is True and first["count"] == 3 and first["size"] == POSITIONS[1]
    assert first["timestamp_type"] == "CreateTime" and first["is_control"] is False
    assert first["records"][0] == {
        "offset": 0,
        "timestamp": BASE_TS,
        "key": None,
        "value": "café 0",
        "headers": [["trace", {"base64": "AP8="}], ["empty", None]],
    }
    assert batches[5]["is_control"] and batches[5]["is_transactional"]
    status, out, _ = dump(segment, "--json", capsys=capsys)
    assert "records" not in orjson.loads(out.splitlines()[0])


def test_rich_tables_on_a_terminal(segment, capsys, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "250")
    status, out, _ = dump(segment, "--records", capsys=capsys)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert status == 0
    assert "offsets 12..14" in text and "codec zstd" in text and "crc ok" in text
    assert "café 2" in text and "endTxnMarker: ABORT" in text
    status, out, _ = dump(segment, capsys=capsys)
    assert status == 0 and "snappy" in out and "16 records" in out


def test_preallocated_zeros_end_the_data(segment, capsys):
    segment.write_bytes(SEGMENT + bytes(1 << 16))
    status, out, err = dump(segment, capsys=capsys)
    assert status == 0 and err == ""
    assert out.splitlines()[-1].endswith(f"in bytes 0..{len(SEGMENT)} of {len(SEGMENT) + 65536}")


@pytest.mark.parametrize("cut", [8, 20, 60, 61, 100])
def test_torn_tail_prints_what_is_valid_then_fails(segment, capsys, cut):
    segment.write_bytes(SEGMENT[: POSITIONS[4] + cut])
    status, out, err = dump(segment, "--records", capsys=capsys)
    assert status == 1
    assert out.count("baseOffset:") == 4 and "| offset: 11 " in out
    assert f"valid data ends at byte {POSITIONS[4]}: torn batch" in err
    assert "Traceback" not in err


def test_a_torn_header_of_zeros_reads_as_preallocated_space(segment, capsys):
    """The first 7 bytes of base offset 12 are zeros: nothing tells them from preallocation."""
    segment.write_bytes(SEGMENT[: POSITIONS[4] + 7])
    status, out, err = dump(segment, capsys=capsys)
    assert status == 0 and out.count("baseOffset:") == 4 and err == ""


def test_torn_tail_after_preallocation_gap_is_not_hidden(segment, capsys):
    segment.write_bytes(SEGMENT[: POSITIONS[3] + 30] + bytes(31))  # zeros after a torn header
    status, _, err = dump(segment, capsys=capsys)
    assert status == 1 and f"byte {POSITIONS[3]}" in err


def test_corrupt_magic_stops_with_the_reason(segment, capsys):
    data = bytearray(SEGMENT)
    data[POSITIONS[2] + 16] = 1
    segment.write_bytes(bytes(data))
    status, out, err = dump(segment, capsys=capsys)
    assert status == 1 and out.count("baseOffset:") == 2
    assert f"byte {POSITIONS[2]}: magic is 1, expected 2" in err


def test_bad_crc_is_shown_and_fails_but_the_scan_goes_on(segment, capsys):
    data = bytearray(SEGMENT)
    data[POSITIONS[1] + 70] ^= 0xFF  # inside the gzip batch's compressed records
    segment.write_bytes(bytes(data))
    status, out, err = dump(segment, "--records", capsys=capsys)
    assert status == 1 and out.count("baseOffset:") == 6
    assert "compresscodec: gzip crc:" in out and "isvalid: false" in out
    assert "| offset: 3 " not in out and "| offset: 6 " in out  # its records are not decoded
    assert f"byte {POSITIONS[1]}: batch at offset 3 fails its crc" in err


def test_records_that_do_not_decode_stop_with_the_reason(segment, capsys):
    bad = bytearray(build_batch([(BASE_TS, None, b"x" * 50, None)], codec=3))
    bad[61:65] = b"\x00\x00\x00\x00"  # not an lz4 frame, and the crc is recomputed below
    from klog.protocol.record_batch import CRC, compute_crc

    CRC.pack_into(bad, 17, compute_crc(bad, 0, len(bad)))
    segment.write_bytes(SEGMENT + bytes(bad))
    status, out, err = dump(segment, "--records", capsys=capsys)
    assert status == 1 and out.count("baseOffset:") == 6
    assert f"byte {len(SEGMENT)}" in err and "lz4" in err


def test_empty_segment(segment, capsys):
    segment.write_bytes(b"")
    status, out, _ = dump(segment, capsys=capsys)
    assert status == 0 and out.splitlines()[-1] == "0 batches, 0 records in bytes 0..0 of 0"


def test_missing_and_non_segment_paths_exit_2(tmp_path, capsys):
    status, _, err = dump(tmp_path / "00000000000000000000.log", capsys=capsys)
    assert status == 2 and "does not exist" in err
    status, _, err = dump(tmp_path, capsys=capsys)
    assert status == 2 and "is not a file" in err
    other = tmp_path / "00000000000000000000.index"
    other.write_bytes(b"\x00" * 8)
    status, _, err = dump(other, capsys=capsys)
    assert status == 2 and "not a segment file" in err


def test_registered_as_the_dump_log_verb(segment):
    run = subprocess.run(
        [sys.executable, "-m", "klog_cli.main", "dump-log", str(segment), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.splitlines()) == 6
    torn = segment.with_name("00000000000000000100.log")
    torn.write_bytes(SEGMENT[:-3])
    run = subprocess.run(
        [sys.executable, "-m", "klog_cli.main", "dump-log", str(torn)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "valid data ends at byte" in run.stderr
