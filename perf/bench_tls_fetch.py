"""TLS fetch benchmark (issue 22): Fetch MB/s over an SSL listener beside PLAINTEXT sendfile.

Figures, same run, same data (~64 MB of pre-built 1 MB batches in one partition):
- appliance: one worker on PLAINTEXT (records leave with sendfile) and one on SSL (records read
  into a reused buffer and encrypted, appliance/tls/fetch_writer.py); one client reads the
  whole partition several times with 16 MB fetches (the client decrypts on the same machine:
  the TLS figure includes the client's share of the AES work);
- in process, the two ways of feeding the TLS transport from a segment file: os.preadv into a
  reused buffer (what klog does) and memoryviews of an mmap of the file, over loopback TLS.

Run: .venv/bin/python perf/bench_tls_fetch.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import os
import ssl
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from appliance.config import build_config  # noqa: E402
from appliance.tls.context import ServerTls  # noqa: E402
from appliance.tls.fetch_writer import PIECE_BYTES, write_through_tls  # noqa: E402
from klog.admin import Admin  # noqa: E402
from klog.protocol.apis import fetch, produce  # noqa: E402
from klog.protocol.chunks import FileRegion  # noqa: E402
from klog.protocol.records import build_batch  # noqa: E402
from tests.conftest import Appliance  # noqa: E402
from tests.security_tls.certs import KEY_PASSWORD, make_certs  # noqa: E402
from tests.security_tls.helpers import TlsRawClient, client_context, tls_appliance  # noqa: E402

MB = 1 << 20


def _batches(total_mb: int) -> list[bytes]:
    value = os.urandom(1000)
    return [build_batch([(1_700_000_000_000, None, value, [])] * 1000)
            for _ in range(total_mb)]


def _produce(client, batches) -> None:
    for batch in batches:
        client.call(produce, 8, transactional_id=None, acks=1, timeout_ms=10000,
                    topic_data=[produce.TopicProduceData(name="bench", partition_data=[
                        produce.PartitionProduceData(index=0, records=batch)])])


def _fetch_rate(client, rounds: int) -> float:
    nbytes, started = 0, time.perf_counter()
    for _ in range(rounds):
        offset = 0
        while True:
            answer = client.call(
                fetch, 11, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=16 * MB,
                isolation_level=0, session_id=0, session_epoch=-1,
                topics=[fetch.FetchTopic(topic="bench", partitions=[fetch.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=offset,
                    log_start_offset=-1, partition_max_bytes=16 * MB)])],
                forgotten_topics_data=[], rack_id="")
            partition = answer.responses[0].partitions[0]
            records = partition.records or b""
            if not records:
                break
            nbytes += len(records)
            offset = _next_offset(records)
            if offset >= partition.high_watermark:
                break
    return nbytes / MB / (time.perf_counter() - started)


def _next_offset(records) -> int:
    """The offset after the last whole batch of a records section."""
    view, pos, last = memoryview(records), 0, 0
    while pos + 61 <= len(view):
        base = int.from_bytes(view[pos:pos + 8], "big")
        length = int.from_bytes(view[pos + 8:pos + 12], "big")
        if pos + 12 + length > len(view):
            break
        delta = int.from_bytes(view[pos + 23:pos + 27], "big")
        last = base + delta + 1
        pos += 12 + length
    return last


def bench_appliances(workdir: Path, certs, total_mb: int, rounds: int) -> None:
    batches = _batches(total_mb)
    tls = tls_appliance(workdir / "tls", certs)
    plain = Appliance(workdir / "plain")
    for appliance in (tls, plain):
        appliance.start()
    try:
        Admin(plain.bootstrap).create_topic("bench", 1)
        Admin(tls.bootstrap, security_protocol="SSL",
              ssl_cafile=str(certs.ca)).create_topic("bench", 1)
        clients = {"PLAINTEXT (sendfile)": TlsRawClient(plain.port, None),
                   "SSL (preadv + encrypt)": TlsRawClient(tls.port, client_context(certs))}
        for client in clients.values():
            _produce(client, batches)
        for name, client in clients.items():
            _fetch_rate(client, 1)  # warm the page cache and the connection
            print(f"  appliance fetch over {name:24s}: {_fetch_rate(client, rounds):8.1f} MB/s")
            client.close()
    finally:
        tls.stop()
        plain.stop()


async def _serve_file(tls: ServerTls, certs, path: Path, size: int, use_mmap: bool) -> float:
    fd = os.open(path, os.O_RDONLY)
    writable = asyncio.Event()
    writable.set()
    done = asyncio.get_running_loop().create_future()

    class Protocol(asyncio.Protocol):
        def connection_made(self, transport):
            transport.set_write_buffer_limits(high=MB)
            asyncio.ensure_future(self.send(transport))

        def pause_writing(self):
            writable.clear()

        def resume_writing(self):
            writable.set()

        async def send(self, transport):
            if use_mmap:
                with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mapped:
                    view = memoryview(mapped)
                    for at in range(0, size, PIECE_BYTES):
                        transport.write(view[at:at + PIECE_BYTES])
                        await writable.wait()
                    del view
            else:
                await write_through_tls(transport, [FileRegion(fd, 0, size)], writable.wait)
            done.set_result(None)

    server = await asyncio.get_running_loop().create_server(Protocol, "127.0.0.1", 0,
                                                            ssl=tls.context)
    port = server.sockets[0].getsockname()[1]
    started = time.perf_counter()
    async with server:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context(certs), server_hostname="localhost")
        got = 0
        while got < size:
            got += len(await reader.read(4 * MB))
        await done
        writer.close()
    os.close(fd)
    return size / MB / (time.perf_counter() - started)


def bench_in_process(workdir: Path, certs, total_mb: int) -> None:
    path = workdir / "segment.log"
    path.write_bytes(os.urandom(total_mb * MB))
    tls = ServerTls(build_config({
        "listeners": "SSL://127.0.0.1:9093", "ssl.keystore.location": str(certs.server_keystore),
        "ssl.key.password": KEY_PASSWORD}))
    for name, use_mmap in (("os.preadv into a reused buffer", False),
                           ("memoryviews of an mmap", True)):
        asyncio.run(_serve_file(tls, certs, path, total_mb * MB, use_mmap))  # warm
        rate = asyncio.run(_serve_file(tls, certs, path, total_mb * MB, use_mmap))
        print(f"  in process, {name:32s}: {rate:8.1f} MB/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    total_mb, rounds = (16, 2) if args.quick else (64, 4)
    with tempfile.TemporaryDirectory(prefix="klog-bench-tls-") as tmp:
        workdir = Path(tmp)
        certs = make_certs(workdir / "certs")
        print(f"TLS fetch benchmark ({ssl.OPENSSL_VERSION}), {total_mb} MB, {rounds} rounds")
        bench_appliances(workdir, certs, total_mb, rounds)
        bench_in_process(workdir, certs, total_mb)


if __name__ == "__main__":
    main()
