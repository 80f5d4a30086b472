"""Whether this appliance's log dirs have the bytes a new topic's logs preallocate (issue 26).

A new partition's first segment is preallocated to `segment.bytes` and its two indexes to
`segment.index.bytes` each, when its worker opens it: after the topic was decided. On a disk
too small for that, CreateTopics answered UNKNOWN_SERVER_ERROR with a traceback and left the
topic decided but without logs. Checked before anything is decided, a refusal changes
nothing and answers Kafka's KAFKA_STORAGE_ERROR, naming the log dir and the bytes missing.
"""

from __future__ import annotations

import logging
import shutil

from appliance.segments.config import LogConfig

log = logging.getLogger(__name__)

# kept free beyond the new logs: checkpoints, the catalog, a segment roll elsewhere
SPARE_BYTES = 16 * 1024 * 1024


def preallocated_bytes(config: LogConfig) -> int:
    """What one new partition log takes on disk at once: its first segment and indexes."""
    return config.segment_bytes + 2 * config.segment_index_bytes


def room_for(log_dirs: list[str], partitions_per_dir: int, config: LogConfig) -> str | None:
    """None when every log dir can preallocate `partitions_per_dir` new logs of `config`;
    otherwise the reason, naming the first log dir short of space."""
    need = partitions_per_dir * preallocated_bytes(config)
    for log_dir in log_dirs:
        try:
            free = shutil.disk_usage(log_dir).free
        except OSError:  # gone or unreadable: the log's own open will say why
            continue
        if need + SPARE_BYTES > free:
            reason = (f"not enough disk space in {log_dir} for {partitions_per_dir} new "
                      f"partition log(s) of {preallocated_bytes(config)} bytes each "
                      f"(segment.bytes + 2 x segment.index.bytes, preallocated): "
                      f"{free} bytes free")
            log.error("CreateTopics refused: %s", reason)
            return reason
    return None
