"""The high-watermark checkpoint of a log dir: Kafka's replication-offset-checkpoint format,
written atomically, and read back; a damaged one reads as empty instead of failing start."""

from __future__ import annotations

from appliance.workers.replication import checkpoints as hw_checkpoint


def test_written_in_kafkas_format_and_read_back(tmp_path):
    entries = {("orders", 0): 1200, ("orders", 1): 7, ("a.b-c", 12): 0}
    hw_checkpoint.write(tmp_path, entries)
    assert (tmp_path / hw_checkpoint.FILE).read_text() == (
        "0\n3\na.b-c 12 0\norders 0 1200\norders 1 7\n")
    assert hw_checkpoint.read(tmp_path) == entries
    hw_checkpoint.write(tmp_path, {})
    assert hw_checkpoint.read(tmp_path) == {}


def test_missing_or_damaged_reads_as_empty(tmp_path):
    assert hw_checkpoint.read(tmp_path) == {}
    (tmp_path / hw_checkpoint.FILE).write_text("0\n5\norders 0 12\n")  # count disagrees
    assert hw_checkpoint.read(tmp_path) == {}
    (tmp_path / hw_checkpoint.FILE).write_text("0\n1\norders zero 12\n")
    assert hw_checkpoint.read(tmp_path) == {}
