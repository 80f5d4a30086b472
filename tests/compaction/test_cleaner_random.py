"""Seeded random operation sequences against an oracle: appends of updates and tombstones,
rolls, cleanings with map bounds that force partial runs, reopenings, and a follower copying
the leader; after every step the log holds only records that were written, at their offsets,
each key's latest record, and a follower's copy reads the same as its leader."""

from __future__ import annotations

import dataclasses
import random

import pytest

from appliance.segments import PartitionLog
from appliance.segments.cleaner import CleanerSettings, clean

from .logs import SMALL, all_records, assert_compacted, write_updates


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_keep_the_log_a_compaction_of_what_was_written(tmp_path, seed):
    rng = random.Random(seed)
    config = dataclasses.replace(SMALL, delete_retention_ms=rng.choice([0, 10**9]))
    directory = str(tmp_path / "t-0")
    plog = PartitionLog.open(directory, config, now_ms=0)
    written, latest, checkpoint, now = {}, {}, None, 1_000
    try:
        for step in range(25):
            op = rng.choice(["append", "append", "append", "roll", "clean", "clean", "reopen"])
            if op == "append":
                before_end = plog.log_end_offset
                update = write_updates(plog, rng.randrange(1, 120), rng.choice([3, 30]),
                                       seed=seed * 100 + step, per_batch=rng.randrange(1, 6),
                                       now_ms=now, codec=rng.choice([0, 0, 1]),
                                       tombstone_every=rng.choice([0, 5]))
                latest.update(update)
                written.update({r[0]: r for r in all_records(plog) if r[0] >= before_end})
            elif op == "roll":
                plog.roll(now_ms=now)
            elif op == "clean":
                settings = CleanerSettings(dedupe_buffer_bytes=rng.choice([24 * 10, 1 << 20]),
                                           io_buffer_bytes=rng.choice([512, 1 << 16]))
                result = clean(plog, checkpoint=checkpoint, now_ms=now, settings=settings,
                               force=rng.random() < 0.5)
                if result is not None and result.cleaned_through >= 0:
                    checkpoint = result.cleaned_through
            else:
                plog.close()
                plog = PartitionLog.open(directory, config, now_ms=now)
            now += rng.randrange(0, 400)
            after = all_records(plog)
            assert_compacted(list(written.values()), after,
                             {k: v for k, v in latest.items() if v[1] is not None})
            assert plog.log_end_offset == (max(written) + 1 if written else 0)
        follower = PartitionLog.open(str(tmp_path / "f-0"), config, now_ms=now)
        try:
            for where, header in plog.iter_batch_headers():
                follower.append(plog.read_batch(where, header.size), now_ms=now,
                                assign_offsets=False)
            assert all_records(follower) == all_records(plog)
        finally:
            follower.close()
    finally:
        plog.close()
