"""Security benchmark (issue 22): what SASL_SSL with SCRAM-SHA-512 costs against PLAINTEXT.

Figures, same run, the same clients and the same data:
- throughput: confluent-kafka's Producer at its defaults (``produce()`` one 200-byte message at
  a time, then ``flush()``) and its Consumer at its defaults (a group, ``auto.offset.reset=
  earliest``; timed from the first message to the last, so the group join is left out) on a
  one-partition topic of an appliance on PLAINTEXT and of one on SASL_SSL (SCRAM-SHA-512, the
  server's certificate and name verified); one worker each. The two alternate, round after
  round, so the machine's drift (two cores shared with test suites) hits both alike; each
  round prints its ratio, the summary the medians;
- connection set-up, one connection after another from a raw client (klog's sans-IO codec
  over a blocking socket): PLAINTEXT is TCP connect + ApiVersions; SASL_SSL is TCP connect +
  the TLS handshake (TLS 1.3, the client verifying) + ApiVersions + SaslHandshake + the two
  SaslAuthenticate round trips of SCRAM-SHA-512 (4096 iterations: the PBKDF2 runs once per
  user at `klog users add`, the server's per-login cost is the HMACs and the client's is the
  PBKDF2 of its password, which every real client does per connection). Printed: p50 and p99
  of the whole, and of the SCRAM part alone (after TLS and ApiVersions); and PLAIN over the
  same TLS for comparison.

Run: .venv/bin/python perf/bench_security.py [--quick] [--rounds N] [--messages N]
     [--connections N]
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer  # noqa: E402

import klog  # noqa: E402
from klog.protocol.apis import api_versions, sasl_authenticate, sasl_handshake  # noqa: E402
from klog.protocol.client import ClientConnection  # noqa: E402
from klog.protocol.sasl.client import new_client  # noqa: E402
from tests.conftest import Appliance  # noqa: E402
from tests.security.helpers import CREDENTIALS, SCRAM_PASSWORD, SCRAM_USER  # noqa: E402
from tests.security_tls.certs import make_certs  # noqa: E402
from tests.security_tls.helpers import sasl_ssl_appliance  # noqa: E402
from tests.worker.raw import RawClient  # noqa: E402

VALUE = b"x" * 200
MB = 1 << 20


def confluent_conf(appliance: Appliance, certs, secured: bool) -> dict:
    conf = {"bootstrap.servers": appliance.bootstrap}
    if secured:
        conf.update({"security.protocol": "SASL_SSL", "ssl.ca.location": str(certs.ca),
                     "ssl.endpoint.identification.algorithm": "https",
                     "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": SCRAM_USER,
                     "sasl.password": SCRAM_PASSWORD})
    return conf


def klog_options(certs, secured: bool) -> dict:
    if not secured:
        return {}
    return {"security_protocol": "SASL_SSL", "ssl_cafile": str(certs.ca),
            "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": SCRAM_USER,
            "sasl_plain_password": SCRAM_PASSWORD}


def produce_rate(conf: dict, topic: str, messages: int) -> float:
    """Messages per second, from the first produce() to the end of flush()."""
    producer = Producer(conf)
    producer.list_topics(topic, timeout=30)  # connected (and authenticated) before the clock
    started = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.001)
    assert producer.flush(120) == 0
    return messages / (time.perf_counter() - started)


# librdkafka stops fetching for `fetch.queue.backoff.ms` (1 s) once it holds
# `queued.min.messages` (100,000) not yet consumed: at the defaults a consumer that fetches
# faster than this loop takes messages stalls about a second, or not, by chance (seen: the
# plaintext consume at 0.25 or 1.5 M msg/s from round to round). The tuned figure lifts it.
QUEUE_TUNED = {"queued.min.messages": 10_000_000, "fetch.queue.backoff.ms": 10}


def consume_rate(conf: dict, topic: str, messages: int, group: str) -> float:
    """Messages per second, from the first batch received to the last. `consume(n)` hands
    over up to n messages per call: a `poll()` per message measured this loop, not TLS."""
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    total, timed, started, deadline = 0, 0, None, time.monotonic() + 300
    try:
        while total < messages and time.monotonic() < deadline:
            batch = consumer.consume(10_000, 1.0)
            good = sum(1 for m in batch if m.error() is None)
            total += good
            if started is None:
                if good:  # the clock starts when the first batch is in hand
                    started = time.perf_counter()
                continue
            timed += good
    finally:
        consumer.close()
    assert total >= messages, f"consumed {total} of {messages}"
    return timed / (time.perf_counter() - started)


def bench_throughput(appliances: dict, certs, rounds: int, messages: int) -> None:
    mb = messages * len(VALUE) / MB
    print(f"\nthroughput, confluent-kafka at its defaults, {messages:,} messages of "
          f"{len(VALUE)} bytes ({mb:.0f} MB of values) per round, one partition, one worker\n"
          f"(tuned: the consumer with {QUEUE_TUNED}):")
    kinds = ("produce", "consume", "consume tuned")
    figures = {name: {kind: [] for kind in kinds} for name in appliances}
    for n in range(1, rounds + 1):
        line = []
        for name, (appliance, secured) in appliances.items():
            topic = f"bench-{n}"
            with klog.Admin(appliance.bootstrap, **klog_options(certs, secured)) as admin:
                admin.create_topic(topic, 1)
            conf = confluent_conf(appliance, certs, secured)
            produced = produce_rate(conf, topic, messages)
            consumed = consume_rate(conf, topic, messages, f"g-{n}")
            tuned = consume_rate({**conf, **QUEUE_TUNED}, topic, messages, f"t-{n}")
            for kind, value in zip(kinds, (produced, consumed, tuned)):
                figures[name][kind].append(value)
            line.append(f"{name} produce {produced:9,.0f} consume {consumed:9,.0f} "
                        f"tuned {tuned:9,.0f} msg/s")
        plain, secure = (figures[name] for name in appliances)
        print(f"  round {n}: " + " | ".join(line) + " | ratio " + " ".join(
            f"{kind} {secure[kind][-1] / plain[kind][-1]:.2f}" for kind in kinds), flush=True)
    print("  medians:")
    base = next(iter(figures.values()))
    for name, rows in figures.items():
        cells = []
        for kind in kinds:
            median = statistics.median(rows[kind])
            cells.append(f"{kind} {median:9,.0f} msg/s {median * len(VALUE) / MB:6.1f} MB/s "
                         f"({median / statistics.median(base[kind]):.2f}x)")
        print(f"    {name:<22s} " + "   ".join(cells))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def connect_plaintext(port: int) -> tuple[float, float]:
    started = time.perf_counter()
    client = RawClient(port)
    assert client.call(api_versions, 0).error_code == 0
    took = time.perf_counter() - started
    client.close()
    return took, 0.0


def connect_sasl_ssl(port: int, context: ssl.SSLContext, mechanism: str) -> tuple[float, float]:
    """(the whole set-up, its SASL part) in seconds."""
    user, password = CREDENTIALS[mechanism]
    started = time.perf_counter()
    client = RawClient.__new__(RawClient)
    client.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                      server_hostname="127.0.0.1")
    client.codec = ClientConnection(client_id="bench-security")
    assert client.call(api_versions, 0).error_code == 0
    sasl_started = time.perf_counter()
    assert client.call(sasl_handshake, 1, mechanism=mechanism).error_code == 0
    sasl = new_client(mechanism, user, password, secrets.token_urlsafe(24))
    token = sasl.first()
    while token is not None:
        answer = client.call(sasl_authenticate, 2, auth_bytes=token)
        assert answer.error_code == 0, answer.error_message
        token = sasl.respond(answer.auth_bytes)
    done = time.perf_counter()
    client.close()
    return done - started, done - sasl_started


def bench_connections(appliances: dict, certs, count: int) -> None:
    (plain, _), (secure, _) = appliances.values()
    context = ssl.create_default_context(cafile=str(certs.ca))
    cases = {"PLAINTEXT (connect + ApiVersions)": lambda: connect_plaintext(plain.port),
             "SASL_SSL SCRAM-SHA-512": lambda: connect_sasl_ssl(secure.port, context,
                                                                 "SCRAM-SHA-512"),
             "SASL_SSL PLAIN": lambda: connect_sasl_ssl(secure.port, context, "PLAIN")}
    print(f"\nconnection set-up, {count} connections one after another (ms):")
    base = None
    for name, connect in cases.items():
        for _ in range(5):
            connect()  # warm
        samples = [connect() for _ in range(count)]
        whole = [s[0] * 1000 for s in samples]
        sasl = [s[1] * 1000 for s in samples]
        p50 = percentile(whole, 0.5)
        base = base or p50
        line = (f"  {name:<34s} p50 {p50:6.2f}  p99 {percentile(whole, 0.99):6.2f}"
                f"  ({p50 / base:5.1f}x)")
        if any(sasl):
            line += (f"   of which SASL (handshake + authenticate) p50 "
                     f"{percentile(sasl, 0.5):5.2f} p99 {percentile(sasl, 0.99):5.2f}")
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--messages", type=int)
    parser.add_argument("--connections", type=int)
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    messages = args.messages or (50_000 if args.quick else 300_000)
    connections = args.connections or (50 if args.quick else 200)
    with tempfile.TemporaryDirectory(prefix="klog-bench-security-") as tmp:
        workdir = Path(tmp)
        certs = make_certs(workdir / "certs")
        plain = Appliance(workdir / "plain", settings={"group.initial.rebalance.delay.ms": "0"})
        secure = sasl_ssl_appliance(workdir / "sasl-ssl", certs)
        appliances = {"PLAINTEXT": (plain, False), "SASL_SSL SCRAM-SHA-512": (secure, True)}
        print(f"security benchmark ({ssl.OPENSSL_VERSION}; load {os.getloadavg()[0]:.1f})")
        for appliance, _ in appliances.values():
            appliance.start()
        try:
            bench_connections(appliances, certs, connections)
            bench_throughput(appliances, certs, rounds, messages)
        finally:
            for appliance, _ in appliances.values():
                appliance.stop()
        print(f"(load at the end {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
