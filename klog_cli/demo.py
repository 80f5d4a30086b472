"""`klog demo` (what `make run` runs): start an appliance on the embedded default config,
publish a few events with kcat, read them back, load the demo topic's current hour into the
Parquet warehouse under var/warehouse with Spark, and keep serving until Ctrl-C."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

DEFAULT_CONFIG = Path("config/server.properties")
BOOTSTRAP = "127.0.0.1:9092"
WAREHOUSE = Path("var/warehouse")


def add_arguments(parser) -> None:
    parser.add_argument("--config", default=str(DEFAULT_CONFIG))
    parser.add_argument("--once", action="store_true", help="stop after showing the round trip")


def _wait_listening(process, ports=(9092, 9093), timeout_s=20.0) -> None:
    deadline = time.monotonic() + timeout_s
    waiting = list(ports)
    while waiting and time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the appliance exited with status {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", waiting[0]), timeout=0.2).close()
            waiting.pop(0)
        except OSError:
            time.sleep(0.1)
    if waiting:
        raise SystemExit(f"the appliance did not start listening on {waiting}")


def _kcat(*args, stdin=None) -> str:
    return subprocess.run(["kcat", "-b", BOOTSTRAP, *args], input=stdin, text=True,
                          capture_output=True, check=True, timeout=30).stdout


def _load_hour(console: Console, hour: str) -> None:
    """`klog load-hourly` on the demo topic's current hour (Spark starts in ~10 s). The hour
    is not over yet, hence --allow-incomplete: the ledger marks it so, and the next run
    loads it again with what arrived since."""
    console.rule("[bold]hourly load into var/warehouse (PySpark, local)")
    if shutil.which("java") is None:
        console.print("Java is not installed; `make run` installs it")
        return
    load = subprocess.run([sys.executable, "-m", "klog_cli.main", "load-hourly", "-b", BOOTSTRAP,
                           "-t", "demo", "--hour", hour, "--warehouse", str(WAREHOUSE),
                           "--allow-incomplete", "--master", "local[2]"],
                          stderr=subprocess.PIPE, text=True, timeout=300)
    if load.returncode != 0:
        console.print(f"[red]the hourly load failed:[/red]\n{load.stderr[-2000:]}")


def run(args) -> int:
    console = Console()
    console.rule("[bold]klog appliance")
    process = subprocess.Popen([sys.executable, "-m", "klog_cli.main", "appliance", "run",
                                "--config", args.config])
    try:
        _wait_listening(process)
        hour = None  # the hour the events went into (UTC), once they are published
        if shutil.which("kcat") is None:
            console.print("kcat is not installed; `make run` installs it")
        else:
            events = "".join(f"user{i % 3}:{{\"event\": \"click\", \"n\": {i}}}\n"
                             for i in range(10))
            _kcat("-P", "-t", "demo", "-K", ":", "-z", "lz4", stdin=events)
            console.print("[green]published 10 events to topic 'demo' with kcat (lz4)")
            out = _kcat("-C", "-t", "demo", "-o", "beginning", "-e", "-q",
                        "-f", "partition %p offset %o key %k value %s\n")
            console.print(out.rstrip())
            console.print(_kcat("-L", "-t", "demo").rstrip())
            hour = time.strftime("%Y-%m-%dT%H", time.gmtime())
        status = subprocess.run([sys.executable, "-m", "klog_cli.main", "status", "--config",
                                 args.config, "--interval", "0.5"], capture_output=True,
                                text=True)
        print(status.stdout.rstrip() or status.stderr.rstrip(), flush=True)
        if hour is not None:
            _load_hour(console, hour)
        if args.once:
            return 0
        console.print(f"[bold]serving on {BOOTSTRAP}; Ctrl-C stops")
        process.wait()
        return process.returncode or 0
    except KeyboardInterrupt:
        return 0
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(15)
