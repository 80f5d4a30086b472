"""Kafka's checkpoint file format (checkpoint_file.py): written as Kafka writes it, read back
field for field, and every kind of damage refused with the path and what is wrong."""

from __future__ import annotations

import pytest

from appliance.segments.checkpoint_file import read_entries, write_entries


def test_written_in_kafkas_format_and_read_back(tmp_path):
    path = tmp_path / "replication-offset-checkpoint"
    write_entries(path, [("orders", 0, 1200), ("orders", 1, 7)])
    assert path.read_text() == "0\n2\norders 0 1200\norders 1 7\n"
    assert read_entries(path, fields=3) == [["orders", "0", "1200"], ["orders", "1", "7"]]
    assert not (tmp_path / "replication-offset-checkpoint.tmp").exists()  # replaced, not left


def test_an_empty_table_and_another_version(tmp_path):
    path = str(tmp_path / "checkpoint")  # a str path as well as a Path
    write_entries(path, iter(()), version=1)
    assert (tmp_path / "checkpoint").read_text() == "1\n0\n"
    assert read_entries(path, fields=2, version=1) == []


def test_blank_lines_and_surrounding_spaces_are_skipped(tmp_path):
    path = tmp_path / "checkpoint"
    path.write_text("0\n2\n\n 0 0 \n3  4\n\n")
    assert read_entries(path, fields=2) == [["0", "0"], ["3", "4"]]


def test_a_missing_file_is_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_entries(tmp_path / "checkpoint", fields=2)


@pytest.mark.parametrize(("text", "wrong"), [
    ("1\n1\n0 0\n", "expected version 0 on line 1, found '1'"),
    ("", "expected version 0 on line 1, found 'an empty file'"),
    ("0 0\n0\n", "expected version 0 on line 1, found '0 0'"),
    ("0\n", "expected a count of entries on line 2, found 'nothing'"),
    ("0\ntwo\n0 0\n", "expected a count of entries on line 2, found 'two'"),
    ("0\n-1\n", "expected a count of entries on line 2, found '-1'"),
    ("0\n3\n0 0\n2 5\n", "3 entries announced, 2 found"),
    ("0\n1\n0 0\n2 5\n", "1 entries announced, 2 found"),
    ("0\n2\n0 0\n2 5 9\n", "entry 2 has 3 fields, not 2: '2 5 9'"),
    ("0\n1\ngarbage\n", "entry 1 has 1 fields, not 2: 'garbage'"),
])
def test_damage_is_refused_naming_the_file_and_what_is_wrong(tmp_path, text, wrong):
    path = tmp_path / "checkpoint"
    path.write_text(text)
    with pytest.raises(ValueError) as refused:
        read_entries(path, fields=2)
    assert str(refused.value) == f"{path}: {wrong}"


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "checkpoint"
    path.write_bytes(b"0\n1\n\xff\xfe 0\n")
    with pytest.raises(ValueError, match="not UTF-8 text"):
        read_entries(path, fields=2)
