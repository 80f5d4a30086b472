"""Broker benchmark (issue 3): produce and fetch through one worker, beside raw baselines.

Figures, each next to a baseline measured in the same run on the same disk:
- produce, real client: kcat (librdkafka; linger.ms=5, batch.size=1 MiB, acks=1) sending
  200-byte messages from a file: msg/s and MB/s into the broker.
- produce, broker isolated: a pipelined raw producer sending pre-built 1 MiB batches of the
  same 200-byte messages (acks=1, 8 requests in flight), so the client costs almost nothing;
  baseline for both: raw sequential write MB/s of the same bytes to the same disk.
- fetch: a raw fetch loop (our codec, discarding the bytes) reading the topic from the start:
  MB/s served; baseline: raw os.sendfile of the same segment files over loopback to a reader
  in another process.
- acks=all produce latency p50/p99 at a moderate rate (group commit).
- the worker's CPU seconds per GB produced and per GB fetched (from /proc/<pid>/stat).

Run: .venv/bin/python perf/bench_broker.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from klog.protocol.apis import fetch, produce  # noqa: E402
from klog.protocol.client import NEED_DATA, ClientConnection  # noqa: E402
from klog.protocol.headers import read_response_header, response_header_version  # noqa: E402
from klog.protocol.records import build_batch  # noqa: E402
from tests.conftest import Appliance  # noqa: E402
from tests.interop.helpers import create_topic  # noqa: E402

MB = 1_000_000
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def raw_write_mb_s(directory: Path, total_bytes: int) -> float:
    block = os.urandom(1 << 20)
    path = directory / "raw-write.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    written = 0
    while written < total_bytes:
        written += os.write(fd, block)
    elapsed = time.perf_counter() - start
    os.close(fd)
    path.unlink()
    return written / MB / elapsed


def bench_produce_kcat(appliance: Appliance, topic: str, messages: int, workdir: Path):
    lines = workdir / "lines.txt"
    with open(lines, "wb") as f:
        f.write((b"x" * 199 + b"\n") * messages)
    start = time.perf_counter()
    subprocess.run(["kcat", "-b", appliance.bootstrap, "-P", "-t", topic, "-X", "linger.ms=5",
                    "-X", "batch.size=1048576", "-X", "acks=1",
                    "-X", "queue.buffering.max.kbytes=1048576", "-l", str(lines)], check=True)
    elapsed = time.perf_counter() - start
    lines.unlink()
    return messages / elapsed, messages * 200 / MB / elapsed


def bench_produce_raw(appliance: Appliance, topic: str, messages: int, in_flight: int = 8,
                      partitions: tuple[int, ...] = (0, 1)):
    """Pipelined Produce v8 of pre-built batches: what the broker can take in."""
    per_batch = 4900  # 200-byte values: just under max.message.bytes (1 MiB)
    batches = [build_batch([(int(time.time() * 1000), None, b"x" * 200, [])] * per_batch)
               for _ in range(2)]
    codec = ClientConnection(client_id="bench-raw")
    sock = socket.create_connection(("127.0.0.1", appliance.port))
    sent = answered = 0
    total = messages // per_batch
    start = time.perf_counter()
    while answered < total:
        while sent < total and sent - answered < in_flight:
            data = produce.PartitionProduceData(index=partitions[sent % len(partitions)],
                                                records=batches[sent % 2])
            request = produce.Request(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
                produce.TopicProduceData(name=topic, partition_data=[data])])
            sock.sendall(codec.send_request(produce.SPEC.key, 8, request)[1])
            sent += 1
        event = codec.next_response()
        if event is NEED_DATA:
            codec.receive_data(sock.recv(65536))
            continue
        for topic_response in event[1].responses:
            for part in topic_response.partition_responses:
                assert part.error_code == 0, part
        answered += 1
    elapsed = time.perf_counter() - start
    sock.close()
    return total * per_batch / elapsed, total * per_batch * 200 / MB / elapsed


class RawFetcher:
    """Fetch v11 in a loop with our codec; counts record bytes, never parses them."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.codec = ClientConnection(client_id="bench", max_frame_bytes=512 * 1024 * 1024)
        self.buffer = bytearray(80 << 20)

    def _read_frame(self) -> memoryview:
        """One whole response frame, read with recv_into (no per-chunk bytes objects)."""
        view = memoryview(self.buffer)
        got = 0
        while got < 4:
            got += self.sock.recv_into(view[got:], 4 - got)
        size = int.from_bytes(view[:4], "big") + 4
        while got < size:
            got += self.sock.recv_into(view[got:size])
        return view[:size]

    @staticmethod
    def _decode(frame: memoryview, expected: int):
        """The Fetch v11 body, decoded in place: its records stay views of the receive buffer,
        as the raw baseline's reader never copies the bytes either (``ClientConnection``
        copies a frame handed to it as a memoryview, since its caller may reuse the buffer:
        that copy halved this loop's rate, issue 14)."""
        correlation_id, pos = read_response_header(
            frame[4:], response_header_version(fetch.SPEC.key, 11))
        assert correlation_id == expected, (correlation_id, expected)
        return fetch.SPEC.response.decode(frame[4 + pos:], 11)

    def fetch_all(self, topic: str, partitions: int, end_offsets: dict[int, int]) -> int:
        offsets = {p: 0 for p in range(partitions)}
        self.bytes_by_partition = {p: 0 for p in range(partitions)}
        total = 0
        while any(offsets[p] < end_offsets[p] for p in offsets):
            request = fetch.Request(
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=64 * 1024 * 1024,
                isolation_level=0, session_id=0, session_epoch=-1,
                topics=[fetch.FetchTopic(topic=topic, partitions=[
                    fetch.FetchPartition(partition=p, current_leader_epoch=-1,
                                         fetch_offset=offsets[p], log_start_offset=-1,
                                         partition_max_bytes=16 * 1024 * 1024)
                    for p in offsets if offsets[p] < end_offsets[p]])],
                forgotten_topics_data=[], rack_id="")
            expected, data = self.codec.send_request(fetch.SPEC.key, 11, request,
                                                     expect_response=False)
            self.sock.sendall(data)
            body = self._decode(self._read_frame(), expected)
            for part in body.responses[0].partitions:
                records = part.records
                if records:
                    total += len(records)
                    self.bytes_by_partition[part.partition_index] += len(records)
                    offsets[part.partition_index] = next_offset_after(records)
        return total


def next_offset_after(records) -> int:
    """The offset after the last whole batch in a fetched records blob."""
    from klog.protocol.record_batch import scan_batches

    last = None
    for _, header in scan_batches(records, verify_crc=False):
        last = header
    return last.next_offset


def _drain(port_queue):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port_queue.put(server.getsockname()[1])
    conn, _ = server.accept()
    buffer = bytearray(4 << 20)
    while conn.recv_into(buffer):
        pass
    conn.close()


def raw_sendfile_gb_s(paths: list[tuple[Path, int]]) -> float:
    """Baseline: sendfile the same segment files over loopback to a reader in another process."""
    import multiprocess

    context = multiprocess.get_context("fork")
    ports = context.Queue()
    reader = context.Process(target=_drain, args=(ports,))
    reader.start()
    client = socket.create_connection(("127.0.0.1", ports.get(timeout=10)))
    total = 0
    start = time.perf_counter()
    for path, size in paths:
        with open(path, "rb") as f:
            offset = 0
            while offset < size:
                offset += os.sendfile(client.fileno(), f.fileno(), offset, size - offset)
            total += size
    client.close()
    reader.join()
    elapsed = time.perf_counter() - start
    return total / 1e9 / elapsed


def bench_acks_all_latency(appliance: Appliance, topic: str, count: int, rate: int):
    sock = socket.create_connection(("127.0.0.1", appliance.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    codec = ClientConnection(client_id="latency")
    latencies = []
    interval = 1 / rate
    for _ in range(count):
        batch = build_batch([(int(time.time() * 1000), None, b"y" * 200, [])])
        request = produce.Request(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
            produce.TopicProduceData(name=topic, partition_data=[
                produce.PartitionProduceData(index=0, records=batch)])])
        _, data = codec.send_request(produce.SPEC.key, 8, request)
        start = time.perf_counter()
        sock.sendall(data)
        while codec.next_response() is NEED_DATA:
            codec.receive_data(sock.recv(65536))
        latencies.append((time.perf_counter() - start) * 1000)
        time.sleep(max(0.0, interval - (time.perf_counter() - start)))
    sock.close()
    latencies.sort()
    return statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1]


def raw_fdatasync_latency(directory: Path, count: int, rate: int) -> tuple[float, float]:
    """Baseline for acks=all: write one small record and fdatasync it, at the same rate."""
    path = directory / "raw-sync.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    latencies = []
    for _ in range(count):
        start = time.perf_counter()
        os.write(fd, b"y" * 270)
        os.fdatasync(fd)
        latencies.append((time.perf_counter() - start) * 1000)
        time.sleep(max(0.0, 1 / rate - (time.perf_counter() - start)))
    os.close(fd)
    path.unlink()
    latencies.sort()
    return statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", default=None, help="directory on the disk to measure")
    args = parser.parse_args()
    messages = 500_000 if args.quick else 5_400_000  # about 1 GiB of values
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        workdir = Path(tmp)
        appliance = Appliance(workdir, settings={"log.segment.bytes": str(1 << 30)})
        appliance.start()
        try:
            pid = appliance.worker_pid(0)  # the worker (appliance.process is the supervisor)
            for topic, partitions in (("kcat", 2), ("raw", 2), ("latency", 1)):
                create_topic(appliance.bootstrap, topic, partitions)
            baseline_write = raw_write_mb_s(workdir, messages * 200)
            cpu0 = cpu_seconds(pid)
            kcat_msg_s, kcat_mb_s = bench_produce_kcat(appliance, "kcat", messages, workdir)
            cpu_kcat = cpu_seconds(pid) - cpu0
            cpu0 = cpu_seconds(pid)
            raw_msg_s, raw_mb_s = bench_produce_raw(appliance, "raw", messages)
            cpu_raw = cpu_seconds(pid) - cpu0
            produced_gb = messages * 200 / 1e9
            rows.append(("produce, kcat, 200 B msgs, acks=1", f"{kcat_msg_s:,.0f} msg/s", ""))
            rows.append(("produce MB/s, kcat vs raw write", f"{kcat_mb_s:,.0f} MB/s",
                         f"{baseline_write:,.0f} MB/s"))
            rows.append(("produce MB/s, raw pipelined vs raw write", f"{raw_mb_s:,.0f} MB/s",
                         f"{baseline_write:,.0f} MB/s"))
            rows.append(("  (raw pipelined msg/s)", f"{raw_msg_s:,.0f} msg/s", ""))
            rows.append(("worker CPU s per GB produced (kcat / raw)",
                         f"{cpu_kcat / produced_gb:.2f} / {cpu_raw / produced_gb:.2f}", ""))

            from klog.admin import Admin

            with Admin(appliance.bootstrap) as admin:
                ends = admin.list_offsets("raw")
            fetcher = RawFetcher(appliance.port)
            cpu0 = cpu_seconds(pid)
            start = time.perf_counter()
            fetched = fetcher.fetch_all("raw", 2, ends)
            fetch_elapsed = time.perf_counter() - start
            cpu_fetch = cpu_seconds(pid) - cpu0
            segments = [(next((appliance.log_dirs[0] / f"raw-{p}").glob("*.log")), size)
                        for p, size in fetcher.bytes_by_partition.items()]
            baseline_sendfile = raw_sendfile_gb_s(segments)
            rows.append(("fetch GB/s, raw fetch loop vs raw sendfile",
                         f"{fetched / 1e9 / fetch_elapsed:.2f} GB/s",
                         f"{baseline_sendfile:.2f} GB/s"))
            rows.append(("worker CPU s per GB fetched", f"{cpu_fetch / (fetched / 1e9):.2f}", ""))

            count = 500 if args.quick else 3000
            os.sync()  # let the writeback of the runs above finish before timing fdatasync
            p50, p99 = bench_acks_all_latency(appliance, "latency", count, rate=500)
            raw50, raw99 = raw_fdatasync_latency(workdir, count, rate=500)
            rows.append(("acks=all p50 / p99 at 500 req/s vs write+fdatasync",
                         f"{p50:.2f} / {p99:.2f} ms", f"{raw50:.2f} / {raw99:.2f} ms"))
        finally:
            appliance.stop()
    print(f"{'figure':<46}{'klog':>20}{'baseline (same run)':>22}")
    for name, value, baseline in rows:
        print(f"{name:<46}{value:>20}{baseline:>22}")


if __name__ == "__main__":
    main()
