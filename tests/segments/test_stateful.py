"""Random sequences of appends, reads, rolls, retention, truncation, reopen and crash, checked
against an in-memory oracle (a list of the batches a consumer may see). Seeded; failing
examples are kept in the repository's .hypothesis/examples database and replayed first."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from appliance.segments import CorruptRecordError, OffsetOutOfRangeError, PartitionLog
from klog.protocol import record_batch as rb

from .batches import make_batch, split_batches, with_base_offset
from .conftest import SMALL, crash

REPO = Path(__file__).resolve().parents[2]
# tmpfs when there is one: the machine closes and reopens often, and every close fsyncs
SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None
CONFIG = dataclasses.replace(SMALL, segment_bytes=2048, index_interval_bytes=128,
                             retention_bytes=5000, retention_ms=10_000, segment_index_bytes=240)

# payloads of 0xff never decode as records, so timestamp lookups stay batch-granular
batch_specs = st.tuples(st.integers(1, 5), st.integers(0, 400), st.integers(0, 30))


class Oracle:
    """The visible log: ``batches`` holds (base_offset, stored bytes) from the log start on."""

    def __init__(self):
        self.batches: list[tuple[int, bytes]] = []
        self.log_start = 0
        self.end = 0

    def append(self, batch: bytes) -> int:
        base = self.end
        self.batches.append((base, with_base_offset(batch, base)))
        self.end = base + rb.read_header(batch).last_offset_delta + 1
        return base

    def index_of(self, offset: int) -> int:
        """Index of the batch holding ``offset`` (its last offset >= offset)."""
        for i, (base, data) in enumerate(self.batches):
            if base + rb.read_header(data).last_offset_delta >= offset:
                return i
        raise AssertionError(f"no batch holds {offset}")


@seed(20240611)
class LogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="klog-stateful-", dir=SCRATCH)
        self.now_ms = 1_000_000
        self.log = PartitionLog.open(self.directory + "/t-0", CONFIG, now_ms=self.now_ms)
        self.oracle = Oracle()

    def teardown(self):
        if not self.log.closed:
            self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    @rule(specs=st.lists(batch_specs, min_size=1, max_size=3), advance_ms=st.integers(0, 3000))
    def append(self, specs, advance_ms):
        self._append(specs, advance_ms)

    @rule(specs=st.lists(batch_specs, min_size=1, max_size=8))
    def append_more(self, specs):
        for spec in specs:
            self._append([spec], 100)

    def _append(self, specs, advance_ms):
        self.now_ms += advance_ms
        batches = [make_batch(records=r, payload=b"\xff" * n, base_timestamp=self.now_ms - skew,
                              max_timestamp=self.now_ms) for r, n, skew in specs]
        info = self.log.append(b"".join(batches), now_ms=self.now_ms)
        bases = [self.oracle.append(b) for b in batches]
        assert info.base_offset == bases[0] and info.last_offset == self.oracle.end - 1
        assert info.batch_count == len(batches)

    @rule(position=st.integers(0, 100), flip=st.integers(0, 60))
    def append_with_a_bad_batch(self, position, flip):
        good = make_batch(records=2, payload=b"\xff" * position)
        bad = bytearray(make_batch(records=1, payload=b"\xff" * 10))
        bad[21 + flip % 40] ^= 0x10  # inside the CRC range
        try:
            self.log.append(good + bytes(bad), now_ms=self.now_ms)
        except CorruptRecordError:
            pass
        else:
            raise AssertionError("a corrupt batch was accepted")
        assert self.log.log_end_offset == self.oracle.end

    @rule(pick=st.integers(-2, 10**6), max_bytes=st.integers(0, 3000))
    def read(self, pick, max_bytes):
        o = self.oracle
        offset = o.log_start + pick % (o.end - o.log_start + 3) - 1 if pick >= 0 else pick
        if not o.log_start <= offset <= o.end:
            try:
                self.log.read(offset, max_bytes)
            except OffsetOutOfRangeError:
                return
            raise AssertionError(f"offset {offset} outside [{o.log_start}, {o.end}] was served")
        piece = self.log.read(offset, max_bytes)
        if offset == o.end:
            assert not piece
            return
        got = split_batches(piece.read())
        i = o.index_of(offset)
        assert got == [data for _, data in o.batches[i : i + len(got)]]
        assert len(got) == 1 or piece.length <= max_bytes

    @rule()
    def roll(self):
        self.log.roll(now_ms=self.now_ms)

    @rule(advance_ms=st.integers(0, 8_000))
    def retention(self, advance_ms):
        self.now_ms += advance_ms
        self.log.apply_retention(now_ms=self.now_ms)
        start = self.log.log_start_offset
        assert start >= self.oracle.log_start
        self._drop_below(start)

    def _drop_below(self, start):
        o = self.oracle
        o.log_start = start
        o.batches = [(b, d) for b, d in o.batches
                     if b + rb.read_header(d).last_offset_delta >= start]

    @precondition(lambda self: self.oracle.end > self.oracle.log_start)
    @rule(pick=st.integers(0, 10**6))
    def truncate_to(self, pick):
        o = self.oracle
        offset = o.end - pick % min(o.end - o.log_start + 1, 12)  # mostly near the end
        end = self.log.truncate_to(offset, now_ms=self.now_ms)
        if offset < o.end:
            i = o.index_of(offset)
            o.end = o.batches[i][0]
            o.batches = o.batches[:i]
            o.log_start = min(o.log_start, o.end)
        assert end == o.end

    @rule()
    def close_and_reopen(self):
        self.log.close()
        self.log = PartitionLog.open(self.directory + "/t-0", CONFIG, now_ms=self.now_ms)
        assert self.log.recovery.clean_shutdown and not self.log.recovery.changed

    @rule()
    def crash_and_reopen(self):
        crash(self.log)
        self.log = PartitionLog.open(self.directory + "/t-0", CONFIG, now_ms=self.now_ms)
        assert not self.log.recovery.changed, str(self.log.recovery)

    @rule(back_ms=st.integers(0, 40_000))
    def offset_for_timestamp(self, back_ms):
        target = self.now_ms - back_ms
        expected = None
        for base, data in self.oracle.batches:
            header = rb.read_header(data)
            if header.max_timestamp >= target and header.last_offset >= self.oracle.log_start:
                expected = (max(base, self.oracle.log_start), header.base_timestamp)
                break
        assert self.log.offset_for_timestamp(target) == expected

    @rule()
    def headers_from_disk(self):
        seen = [(h.base_offset, h.size) for _, h in self.log.iter_batch_headers()]
        assert seen == [(b, len(d)) for b, d in self.oracle.batches]

    @invariant()
    def offsets_agree(self):
        log, o = self.log, self.oracle
        assert (log.log_start_offset, log.log_end_offset) == (o.log_start, o.end)
        assert log.high_watermark == log.log_end_offset
        assert log.size_bytes >= sum(len(d) for _, d in o.batches)
        # the kept count (segment_list.py) is the sum over the live segments
        assert log.size_bytes == sum(segment.size for segment in log.segments)
        assert log.segment_count >= 1


LogMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    database=DirectoryBasedExampleDatabase(str(REPO / ".hypothesis" / "examples")),
    suppress_health_check=[HealthCheck.too_slow],
)
TestLogAgainstOracle = LogMachine.TestCase
