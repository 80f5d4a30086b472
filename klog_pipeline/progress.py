"""What a person watching ``klog load-hourly`` sees: a progress bar per hour while Spark
writes it (records, MB, partitions done), and a summary table at the end. Uses rich.

The numbers come from the tasks' progress files (`klog_pipeline.hour_task`): each Spark task
rewrites its own small JSON file about twice a second; a thread here sums them. On a
terminal the bar redraws; elsewhere (systemd's journal) rich prints it once, finished.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from klog_pipeline.hour_task import PROGRESS_DIR

POLL_S = 0.3
MB = 1024 * 1024


class Reporter:
    def __init__(self, console: Console | None = None):
        self.console = console or Console()

    @contextmanager
    def tracking(self, plan, staging: Path, tasks: int) -> Iterator[None]:
        """Show ``plan``'s hour being written to ``staging`` by ``tasks`` Spark tasks."""
        progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(bar_width=16), TaskProgressColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} records"),
            TextColumn("{task.fields[mb]:,.1f} MB"),
            TextColumn("partitions {task.fields[done]}/{task.fields[tasks]}"),
            TimeElapsedColumn(), console=self.console)
        task = progress.add_task(f"{plan.topic} {plan.hour}", total=plan.records, mb=0.0,
                                 done=0, tasks=tasks)
        stop = threading.Event()

        def update() -> None:
            records, size, done = read_progress(staging / PROGRESS_DIR)
            progress.update(task, completed=records, mb=size / MB, done=done)

        def watch() -> None:
            while not stop.wait(POLL_S):
                update()

        watcher = threading.Thread(target=watch, name="klog-progress", daemon=True)
        with progress:
            watcher.start()
            try:
                yield
            finally:
                stop.set()
                watcher.join()
                update()

    def summary(self, topic: str, warehouse: Path, results: list) -> None:
        table = Table(title=f"klog load-hourly: {topic} → {warehouse}", title_justify="left",
                      box=box.SIMPLE_HEAD)
        for column in ("hour", "status", "records", "rejects", "MB", "parts", "s", "rec/s"):
            left = column in ("hour", "status")
            table.add_column(column, justify="left" if left else "right", no_wrap=left)
        for r in results:
            worked = r.status in ("loaded", "reloaded", "incomplete") and r.seconds > 0
            rate = f"{r.records / r.seconds:,.0f}" if worked else ""
            style = {"failed": "red", "refused": "red", "skipped": "dim"}.get(r.status, "")
            table.add_row(r.hour.label, r.status, f"{r.records:,}", f"{r.rejects:,}",
                          f"{r.value_bytes / MB:,.1f}", str(r.partitions),
                          f"{r.seconds:.1f}" if worked else "", rate, style=style)
        if not results:
            table.add_row("-", "nothing to load", "", "", "", "", "", "")
        self.console.print(table)
        for note in dict.fromkeys(r.message for r in results if r.message):
            self.console.print(f"  {note}", markup=False, soft_wrap=True)


def read_progress(folder: Path) -> tuple[int, int, int]:
    """(records, value bytes, tasks done) summed over the tasks' progress files."""
    records = size = done = 0
    for path in folder.glob("*.json") if folder.exists() else []:
        try:
            state = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue  # replaced while we read it: next time
        records += state["records"]
        size += state["bytes"]
        done += bool(state["done"])
    return records, size, done
