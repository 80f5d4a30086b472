"""The leader-epoch cache of a partition: at which offset each leader epoch began.

Kafka's `leader-epoch-checkpoint` in the partition directory, in Kafka's checkpoint format
(`checkpoint_file.py`: a version line `0`, a count line, then `epoch start_offset` per line),
so its tools read it.
A replica truncates by it (KIP-101): a follower asks its leader where the follower's latest
epoch ends in the leader's log and cuts its own log there, instead of cutting to its high
watermark, which lost acknowledged records when two replicas failed in turn.

The file is derived data: every batch carries its `partitionLeaderEpoch`, so a missing or
unreadable file is rebuilt from the batch headers (`rebuild`). Writes replace the file
atomically; an entry is only ever added with a higher epoch (`assign`), and truncation
(`truncate_from_end`) drops the entries at or past the new log end.

Writer thread only, as the log it belongs to.
"""

from __future__ import annotations

import bisect
import logging
import os

from .checkpoint_file import read_entries, write_entries

log = logging.getLogger("klog.segments")

CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    """(epoch, start offset) entries in increasing order of both."""

    def __init__(self, directory: str, entries: list[tuple[int, int]] | None = None):
        self.directory = directory
        self.path = os.path.join(directory, CHECKPOINT_FILE)
        self.entries: list[tuple[int, int]] = list(entries or [])

    # loading -----------------------------------------------------------------------------

    @classmethod
    def load(cls, directory: str, headers=None) -> LeaderEpochCache:
        """Read the checkpoint; when it is missing or unreadable and ``headers`` (an iterable
        of batch headers) is given, rebuild it from them and write it."""
        cache = cls(directory)
        try:
            cache.entries = _parse(cache.path)
            return cache
        except FileNotFoundError:
            pass
        except ValueError as exc:
            log.warning("%s is unreadable (%s): rebuilding it from the batches", cache.path, exc)
        if headers is not None:
            cache.rebuild(headers)
        return cache

    def rebuild(self, headers) -> None:
        """The entries as the batches say (producer batches, stamped -1, are skipped)."""
        entries: list[tuple[int, int]] = []
        empty_log = True
        for header in headers:
            empty_log = False
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not entries or epoch > entries[-1][0]):
                entries.append((epoch, header.base_offset))
        self.entries = entries
        if not empty_log or os.path.exists(self.path):
            # an empty log's absent file reads as what would be written: a new partition is
            # spared two fsyncs (thousands at once, on the worker's loop, for a big topic)
            self._write()

    # queries -----------------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the batch holding ``offset``: the latest entry starting at or before
        it (UNDEFINED_EPOCH before the first entry, or with none)."""
        starts = [s for _, s in self.entries]
        at = bisect.bisect_right(starts, offset)
        return self.entries[at - 1][0] if at else UNDEFINED_EPOCH

    def start_offset_of(self, epoch: int) -> int | None:
        """Where ``epoch`` began in this log, or None if the cache has no entry for it."""
        for entry_epoch, start in self.entries:
            if entry_epoch == epoch:
                return start
        return None

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's `endOffsetFor`: ``(the largest epoch <= epoch, where it ends)``. The latest
        epoch ends at the log end; an older one where the next epoch starts. An epoch below
        every entry answers ``(epoch, first entry's start)``; none known, or a request for
        UNDEFINED_EPOCH: ``(-1, -1)``."""
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        epochs = [e for e, _ in self.entries]
        above = bisect.bisect_right(epochs, epoch)
        if above == len(self.entries):  # above every epoch we know: ours ends at the log end
            return self.latest_epoch, log_end_offset
        if above == 0:
            return epoch, self.entries[0][1]
        return self.entries[above - 1][0], self.entries[above][1]

    # changes -----------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """A new epoch begins at ``start_offset`` (a leader's start, or a follower appending
        the first batch of an epoch). Lower or equal epochs are ignored; an entry that would
        start at or after it with a lower epoch is replaced."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self._write()

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at ``end_offset``: forget epochs that start at or after it."""
        kept = [(e, s) for e, s in self.entries if s < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Retention moved the log start: the epoch holding it now starts there."""
        while len(self.entries) > 1 and self.entries[1][1] <= start_offset:
            self.entries.pop(0)
        if self.entries and self.entries[0][1] < start_offset:
            self.entries[0] = (self.entries[0][0], start_offset)
            self._write()

    def clear(self) -> None:
        """Forget every epoch: the log was emptied and restarted at a new offset."""
        if self.entries:
            self.entries = []
            self._write()

    def _write(self) -> None:
        if not os.path.isdir(self.directory):
            return  # the log was deleted meanwhile
        write_entries(self.path, self.entries)


def _parse(path: str) -> list[tuple[int, int]]:
    """The checkpoint's entries; ValueError also when they are not increasing integers."""
    entries: list[tuple[int, int]] = []
    for fields in read_entries(path, fields=2):
        epoch, start = int(fields[0]), int(fields[1])
        if entries and (epoch <= entries[-1][0] or start < entries[-1][1]):
            raise ValueError(f"{path}: entry {epoch} {start} out of order")
        entries.append((epoch, start))
    return entries
