"""What a SASL_PLAINTEXT listener answers to clients that do not authenticate properly, at
the protocol level (our raw client, so each byte is the test's choice) and with a real
client: each gets Kafka's answer or a closed connection, and a client that did authenticate,
on another connection, keeps being served meanwhile."""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Producer

from klog.protocol.apis import api_versions, metadata, sasl_authenticate, sasl_handshake
from klog.protocol.error_codes import ErrorCode
from klog.protocol.sasl.client import new_client
from tests.conftest import free_port
from tests.polling import wait_until
from tests.security.helpers import (
    CREDENTIALS,
    MECHANISMS,
    PLAIN_USERS,
    SCRAM_PASSWORD,
    SCRAM_USER,
    confluent_conf,
    sasl_appliance,
)
from tests.worker.raw import RawClient

pytestmark = pytest.mark.interop
# Kafka's connection.failed.authentication.delay.ms, lowered from its 100 so that the 1000
# failed logins of the storm below take seconds, not half a minute
DELAY_MS = 20
FAILED_LOGINS, ATTACKERS = 1000, 4


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    metrics_port = free_port()
    started = sasl_appliance(tmp_path_factory.mktemp("sasl-refusals"),
                             **{"metrics.port": str(metrics_port),
                                "connection.failed.authentication.delay.ms": str(DELAY_MS)})
    started.metrics_port = metrics_port
    started.start()
    yield started
    started.stop()


def handshake(client, mechanism, version=1):
    return client.call(sasl_handshake, version, mechanism=mechanism)


def login(appliance, mechanism="PLAIN", user=None, password=None, version=1) -> RawClient:
    """An authenticated raw connection (ApiVersions first, as real clients do)."""
    default_user, default_password = CREDENTIALS[mechanism]
    client = RawClient(appliance.port)
    client.call(api_versions, 0)
    assert handshake(client, mechanism).error_code == 0
    sasl = new_client(mechanism, user or default_user, password or default_password, "cnonce")
    token = sasl.first()
    while token is not None:
        answer = client.call(sasl_authenticate, version, auth_bytes=token)
        assert answer.error_code == 0, answer.error_message
        token = sasl.respond(answer.auth_bytes)
    assert sasl.complete
    return client


def served(client) -> bool:
    """An authenticated connection still gets Metadata answered."""
    return client.call(metadata, 1, topics=[]).brokers != []


def assert_closed(client):
    with pytest.raises((ConnectionError, OSError)):
        client.call(api_versions, 0)


@pytest.fixture(scope="module")
def good(appliance):
    client = login(appliance)
    yield client
    client.close()


def test_api_versions_before_authentication_lists_the_sasl_apis(appliance):
    client = RawClient(appliance.port)
    keys = {k.api_key: (k.min_version, k.max_version)
            for k in client.call(api_versions, 0).api_keys}
    assert keys[17] == (0, 1) and keys[36] == (0, 2)
    client.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"])
@pytest.mark.parametrize("version", [0, 1, 2])
def test_each_mechanism_and_sasl_authenticate_version(appliance, mechanism, version):
    client = login(appliance, mechanism, version=version)
    assert served(client)
    client.close()


def test_the_handshake_lists_the_enabled_mechanisms(appliance):
    client = RawClient(appliance.port)
    assert handshake(client, "PLAIN").mechanisms == MECHANISMS.split(",")
    client.close()


def failed_login(appliance, mechanism, tokens) -> tuple[object, float]:
    """Send `tokens` (the last one must fail); the failure answer and how long it took."""
    client = RawClient(appliance.port)
    assert handshake(client, mechanism).error_code == 0
    for token in tokens[:-1]:
        assert client.call(sasl_authenticate, 1, auth_bytes=token).error_code == 0
    start = time.monotonic()
    answer = client.call(sasl_authenticate, 1, auth_bytes=tokens[-1])
    took = time.monotonic() - start
    assert_closed(client)
    return answer, took


def scram_final(mechanism, user, password):
    """The client-first token, and a function from the server-first to the client-final."""
    sasl = new_client(mechanism, user, password, "cnonce")
    return sasl.first(), sasl.respond


@pytest.mark.parametrize("case", ["plain wrong password", "plain unknown user",
                                  "plain garbage", "scram wrong password",
                                  "scram unknown user", "scram garbage first",
                                  "scram garbage final"])
def test_failed_authentication(appliance, good, case):
    mechanism = "PLAIN" if case.startswith("plain") else "SCRAM-SHA-512"
    if case == "plain wrong password":
        tokens = [b"\0alice\0" + b"not-" + PLAIN_USERS["alice"].encode()]
    elif case == "plain unknown user":
        tokens = [b"\0mallory\0alice-secret"]
    elif case == "plain garbage":
        tokens = [b"\xff\x00garbage"]
    elif case == "scram unknown user":
        tokens = [new_client(mechanism, "mallory", "x", "n").first()]
    elif case == "scram garbage first":
        tokens = [b"\x00\x01\x02 not scram"]
    else:
        client = RawClient(appliance.port)
        assert handshake(client, mechanism).error_code == 0
        password = SCRAM_PASSWORD + ("!" if case == "scram wrong password" else "")
        first, respond = scram_final(mechanism, SCRAM_USER, password)
        server_first = client.call(sasl_authenticate, 1, auth_bytes=first)
        assert server_first.error_code == 0
        final = (respond(server_first.auth_bytes) if case == "scram wrong password"
                 else b"c=biws,r=nonsense,p=AAAA")
        start = time.monotonic()
        answer = client.call(sasl_authenticate, 1, auth_bytes=final)
        took = time.monotonic() - start
        assert_closed(client)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert took >= DELAY_MS / 1000 * 0.9
        assert served(good)
        return
    answer, took = failed_login(appliance, mechanism, tokens)
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer.error_message and "alice-secret" not in answer.error_message
    assert took >= DELAY_MS / 1000 * 0.9  # the answer waited for the delay
    assert served(good)


def test_unsupported_mechanism(appliance, good):
    client = RawClient(appliance.port)
    answer = handshake(client, "GSSAPI")
    assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer.mechanisms == MECHANISMS.split(",")
    assert_closed(client)
    assert served(good)


@pytest.mark.parametrize("after", ["nothing", "handshake"])
def test_a_request_before_authentication_closes_the_connection(appliance, good, after):
    client = RawClient(appliance.port)
    if after == "handshake":
        assert handshake(client, "PLAIN").error_code == 0
    with pytest.raises((ConnectionError, OSError)):
        client.call(metadata, 1, topics=[])
    assert served(good)


def test_sasl_authenticate_before_the_handshake_is_an_illegal_state(appliance, good):
    client = RawClient(appliance.port)
    answer = client.call(sasl_authenticate, 1, auth_bytes=b"\0alice\0alice-secret")
    assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert_closed(client)
    assert served(good)


def test_a_second_handshake_is_an_illegal_state(appliance, good):
    client = RawClient(appliance.port)
    assert handshake(client, "PLAIN").error_code == 0
    assert handshake(client, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert_closed(client)
    assert served(good)


def test_after_authentication_sasl_requests_are_an_illegal_state(appliance):
    client = login(appliance)
    assert handshake(client, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert served(client)  # still open: Kafka answers and keeps the connection
    client.close()


def test_handshake_v0_is_answered_but_raw_tokens_are_not_read(appliance, good):
    client = RawClient(appliance.port)
    answer = handshake(client, "PLAIN", version=0)
    assert answer.error_code == 0 and "PLAIN" in answer.mechanisms
    client.sock.sendall(len(b"\0alice\0alice-secret").to_bytes(4, "big")
                        + b"\0alice\0alice-secret")
    assert client.sock.recv(100) == b""
    assert served(good)


def test_a_frame_that_is_not_kafka_closes_the_connection(appliance, good):
    client = RawClient(appliance.port)
    client.sock.sendall(b"\xff\xff\xff\xffGET / HTTP/1.1\r\n\r\n")
    assert client.sock.recv(100) == b""
    assert served(good)


def test_1000_failed_logins_do_not_slow_another_client(appliance):
    """1000 failed logins in a row, on four connections at a time, while a producer,
    authenticated once, sends one record after another (acks=all, one at a time): it keeps
    completing records all along the storm, each about as fast as before it."""
    producer = Producer({**confluent_conf(appliance.bootstrap, "SCRAM-SHA-512", SCRAM_USER,
                                          SCRAM_PASSWORD), "linger.ms": 0, "acks": "all"})
    failures, lock = [], threading.Lock()

    def attacker(count):
        for _ in range(count):
            answer, _ = failed_login(appliance, "PLAIN", [b"\0alice\0wrong"])
            with lock:
                failures.append(answer.error_code)

    def produce_one(i) -> float:
        delivered = []
        start = time.monotonic()
        producer.produce("storm", value=b"%d" % i, on_delivery=lambda e, m: delivered.append(e))
        producer.flush(30)
        assert delivered == [None]
        return time.monotonic() - start

    produce_one(-1)  # connected, authenticated, topic created
    before = sorted(produce_one(i) for i in range(50))
    threads = [threading.Thread(target=attacker, args=(FAILED_LOGINS // ATTACKERS,))
               for _ in range(ATTACKERS)]
    storm_start = time.monotonic()
    for thread in threads:
        thread.start()
    progress, during = [], []  # failures counted when each record was delivered; latencies
    i = 0
    while any(t.is_alive() for t in threads):
        took = produce_one(i)
        with lock:
            progress.append(len(failures))
        if progress[-1] < FAILED_LOGINS:
            during.append(took)
        i += 1
    for thread in threads:
        thread.join()
    storm_s = time.monotonic() - storm_start
    assert failures == [ErrorCode.SASL_AUTHENTICATION_FAILED] * FAILED_LOGINS
    assert len(during) >= 50, f"only {len(during)} records in {storm_s:.1f} s of failed logins"
    assert len({n for n in progress if n < FAILED_LOGINS}) >= 25  # all along, not in a burst
    p50_before, p50_during = before[len(before) // 2], sorted(during)[len(during) // 2]
    # the test's own attackers share the two cores with the appliance: a margin, not a ratio
    assert p50_during <= 3 * p50_before + 0.010, (
        f"p50 {p50_during * 1000:.1f} ms during the storm, {p50_before * 1000:.1f} ms before")
    print(f"{FAILED_LOGINS} failed logins in {storm_s:.1f} s; produce p50 "
          f"{p50_before * 1000:.1f} ms before, {p50_during * 1000:.1f} ms during "
          f"({len(during)} records)")


def test_the_metrics_count_authentications(appliance):
    """After the module's tests (the storm's failures, the logins above: run it with them)."""
    url = f"http://127.0.0.1:{appliance.metrics_port}/metrics"

    def counted(name: str) -> float:
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        found = re.search(rf'^{name}\{{worker="[^"]*"\}} (\S+)', text, re.M)
        return float(found[1]) if found else -1.0

    wait_until(lambda: counted("klog_authentication_failures_total") >= FAILED_LOGINS, 10,
               "the storm's failures in the metrics (published every 500 ms)")
    assert counted("klog_authentication_successes_total") >= 9
