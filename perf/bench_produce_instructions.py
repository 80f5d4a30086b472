"""What a Produce costs in instructions, counted by callgrind: the same on a quiet machine and a
busy one (issue 14: this 2-core machine runs other test suites, and CPU-time figures moved with
them by 2x).

- the worker: instructions per Produce request of 75 records of 200 bytes (what klog's
  Producer sends at its defaults; idempotent, 5 in flight, raw pipelined client), at acks=all
  and at acks=1, every thread of the worker (the group commit's included). The appliance
  runs under ``valgrind --tool=callgrind --trace-children=yes`` with instrumentation off, and
  ``callgrind_control`` switches it on for the measured requests only;
- the client: instructions per ``send()`` of a 200-byte value at klog's defaults, every
  thread of the producer's process (the sender's encoding, requests and answers included),
  for each batch size asked for.

The kernel's share (syscalls, fdatasync) is not counted: callgrind sees user space only.
Needs valgrind (Debian's package). Takes a few minutes: the worker runs ~50x slower.

Run: .venv/bin/python perf/bench_produce_instructions.py [--requests N] [--messages N]
     [--batch-sizes 16384,1000000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "perf"))

from bench_produce_defaults import raw_produce  # noqa: E402

import klog  # noqa: E402
from tests.conftest import Appliance  # noqa: E402

CLIENT = """
import os, sys, time
import klog
bootstrap, topic, count, sync, batch_size = sys.argv[1:6]
options = {} if batch_size == "default" else {"batch_size": int(batch_size)}
value = b"x" * 200
with klog.Producer(bootstrap_servers=bootstrap, **options) as producer:
    producer.send(topic, value).result(60)
    for _ in range(2000):  # warm: batches, connections, the codec's caches
        producer.send(topic, value)
    producer.flush()
    open(sync + ".ready", "w").close()
    while not os.path.exists(sync + ".go"):
        time.sleep(0.05)
    send = producer.send
    for _ in range(int(count)):
        send(topic, value)
    producer.flush()
    open(sync + ".done", "w").close()
    while not os.path.exists(sync + ".exit"):
        time.sleep(0.05)
"""


def control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def dumped_instructions(directory: Path, pid: int) -> int:
    """Instructions in the newest dump of ``pid`` (its ``totals:`` line)."""
    newest = max(directory.glob(f"cg.{pid}.*"), key=os.path.getmtime)
    return max(int(line.split()[1]) for line in newest.read_text().splitlines()
               if line.startswith(("summary:", "totals:")))


def wait_for(path: Path, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.1)


def worker_instructions(requests: int) -> dict[str, float]:
    """Instructions per request of the worker, acks=all and acks=1."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        appliance = Appliance(work, log_dirs=1, settings={
            "log.segment.bytes": str(1 << 30), "worker.heartbeat.timeout.ms": "600000"})
        log = open(work / "valgrind.log", "wb")  # noqa: SIM115 (open while it runs)
        appliance.process = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--trace-children=yes", "--instr-atstart=no",
             f"--callgrind-out-file={work}/cg.%p", sys.executable, "-m", "klog_cli.main",
             "appliance", "run", "--config", str(appliance.config)],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        appliance._stderr = log
        try:
            deadline = time.monotonic() + 600
            while not (appliance._accepts(appliance.port) and appliance._all_serving()):
                if time.monotonic() > deadline or appliance.process.poll() is not None:
                    raise RuntimeError("the appliance did not start under valgrind")
                time.sleep(1)
            worker = appliance.worker_pid(0)
            with klog.Admin(appliance.bootstrap) as admin:
                for name in ("all", "one", "warm"):
                    admin.create_topic(name, 1)
            raw_produce(appliance.port, "warm", -1, 50)
            raw_produce(appliance.port, "warm", 1, 50)
            figures = {}
            for name, acks in (("all", -1), ("one", 1)):
                control("-z", str(worker))
                control("-i", "on", str(worker))
                raw_produce(appliance.port, name, acks, requests)
                control("-i", "off", str(worker))
                control("-d", str(worker))
                figures[name] = dumped_instructions(work, worker) / requests
            return figures
        finally:
            appliance.stop(timeout_s=120)


def client_instructions(messages: int, batch_size: str) -> float:
    """Instructions per send() of the client's process at klog's defaults (+ batch_size)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        appliance = Appliance(work / "appliance", log_dirs=1,
                              settings={"log.segment.bytes": str(1 << 30)})
        appliance.start()
        try:
            with klog.Admin(appliance.bootstrap) as admin:
                admin.create_topic("t", 1)
            sync = work / "sync"
            child = subprocess.Popen(
                ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                 f"--callgrind-out-file={work}/cg.%p", sys.executable, "-c", CLIENT,
                 appliance.bootstrap, "t", str(messages), str(sync), batch_size],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                wait_for(Path(f"{sync}.ready"))
                control("-i", "on", str(child.pid))
                Path(f"{sync}.go").touch()
                wait_for(Path(f"{sync}.done"))
                control("-i", "off", str(child.pid))
                control("-d", str(child.pid))
                Path(f"{sync}.exit").touch()
                child.wait(300)
            finally:
                if child.poll() is None:
                    child.kill()
            return dumped_instructions(work, child.pid) / messages
        finally:
            appliance.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--batch-sizes", default="default,1000000")
    args = parser.parse_args()
    worker = worker_instructions(args.requests)
    print("worker, instructions per 75-record Produce request (all its threads):")
    for name, value in worker.items():
        print(f"  acks={name:<3} {value:10,.0f}")
    print("client, instructions per send() of 200 bytes (all its threads):")
    for batch_size in args.batch_sizes.split(","):
        value = client_instructions(args.messages, batch_size)
        print(f"  batch_size={batch_size:<8} {value:10,.0f}", flush=True)


if __name__ == "__main__":
    main()
