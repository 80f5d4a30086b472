"""The warehouse's layout and the one place that moves an hour's files into view.

Layout under the warehouse root (a local directory or a shared mount every executor sees)::

    <topic>/dt=2026-11-21/hour=13/part-*.parquet        the events table
    _rejects/<topic>/dt=2026-11-21/hour=13/part-*.parquet
    _ledger/<topic>.json, _ledger/<topic>.lock
    _staging/<topic>/<hour>-<random>/                   a load in progress (never read)

Names starting with ``_`` are skipped by Spark's partition discovery, so reading
``<topic>/`` sees only published hours. Publishing is a ``rename`` of a finished directory
(atomic on one filesystem), rejects first, events second, the ledger last (`klog_pipeline.loader`);
a crash leaves at worst a whole directory the ledger does not claim, which the next run
discards before it loads the hour again.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from klog_pipeline.files import remove_tree, rename_durable
from klog_pipeline.hours import Hour


@dataclass(frozen=True)
class Warehouse:
    root: Path

    def events_dir(self, topic: str, hour: Hour) -> Path:
        return self.root / topic / f"dt={hour.dt}" / f"hour={hour.hh}"

    def rejects_dir(self, topic: str, hour: Hour) -> Path:
        return self.root / "_rejects" / topic / f"dt={hour.dt}" / f"hour={hour.hh}"

    def ledger_path(self, topic: str) -> Path:
        return self.root / "_ledger" / f"{topic}.json"

    def lock_path(self, topic: str) -> Path:
        return self.root / "_ledger" / f"{topic}.lock"

    def staging_root(self, topic: str) -> Path:
        return self.root / "_staging" / topic

    def new_staging(self, topic: str, hour: Hour) -> Path:
        path = self.staging_root(topic) / f"{hour.label}-{secrets.token_hex(4)}"
        path.mkdir(parents=True)
        return path

    def clear_staging(self, topic: str) -> None:
        """Remove what interrupted loads of ``topic`` left (call with the topic's lock)."""
        remove_tree(self.staging_root(topic))

    def has_files(self, topic: str, hour: Hour) -> bool:
        return self.events_dir(topic, hour).exists() or self.rejects_dir(topic, hour).exists()

    def discard_hour(self, topic: str, hour: Hour) -> None:
        """Take the hour's published directories out of view (renamed into staging first, so
        readers never see a half-deleted directory), then delete them."""
        trash = self.staging_root(topic) / f"discarded-{secrets.token_hex(4)}"
        for kind, path in (("events", self.events_dir(topic, hour)),
                           ("rejects", self.rejects_dir(topic, hour))):
            if path.exists():
                rename_durable(path, trash / kind)
        remove_tree(trash)

    def publish(self, topic: str, hour: Hour, staging: Path, manifest: dict) -> None:
        """Move the manifest's files into view: files of failed task attempts (in no
        manifest) are deleted first; rejects go first, events last."""
        from klog_pipeline.faults import fault_point

        for kind in ("events", "rejects"):
            keep = set(manifest[f"{kind}_files"])
            folder = staging / kind
            for path in sorted(folder.glob("*")) if folder.exists() else []:
                if f"{kind}/{path.name}" not in keep:
                    path.unlink()
        if manifest["rejects_files"]:
            rename_durable(staging / "rejects", self.rejects_dir(topic, hour))
        fault_point("between-renames")
        if manifest["events_files"]:
            rename_durable(staging / "events", self.events_dir(topic, hour))
