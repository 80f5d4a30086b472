"""TLS pieces without an appliance: the ssl.* keys, the server context and its reload, the
principal, and the fetch writer over a real TLS connection in this process."""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
from pathlib import Path

import pytest

from appliance.config import ConfigError, build_config
from appliance.tls.context import ServerTls, build_server_context
from appliance.tls.fetch_writer import PIECE_BYTES, ShortRead, write_through_tls
from appliance.tls.principal import ANONYMOUS, principal_of, rfc2253
from klog.protocol.chunks import FileRegion
from tests.security_tls.certs import KEY_PASSWORD, make_certs, server_keystore

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def ssl_settings(certs, **extra):
    return {"listeners": "SSL://127.0.0.1:9093", "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server_keystore),
            "ssl.key.password": KEY_PASSWORD, **extra}


# config --------------------------------------------------------------------------------


def test_an_ssl_listener_without_a_keystore_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        build_config({"listeners": "SSL://127.0.0.1:9093"})


@pytest.mark.parametrize("kind", ["JKS", "PKCS12"])
def test_jks_and_pkcs12_are_refused_naming_the_key(certs, kind):
    with pytest.raises(ConfigError, match="ssl.keystore.type"):
        build_config(ssl_settings(certs, **{"ssl.keystore.type": kind}))
    with pytest.raises(ConfigError, match="ssl.truststore.type"):
        build_config(ssl_settings(certs, **{"ssl.truststore.type": kind}))


@pytest.mark.parametrize("old", ["TLSv1", "TLSv1.1", "SSLv3"])
def test_protocols_older_than_tls12_are_refused(certs, old):
    with pytest.raises(ConfigError, match="ssl.enabled.protocols"):
        build_config(ssl_settings(certs, **{"ssl.enabled.protocols": f"TLSv1.2,{old}"}))


@pytest.mark.parametrize("key", ["ssl.keystore.password", "ssl.truststore.password"])
def test_store_passwords_are_refused_for_pem_naming_the_key(certs, key):
    with pytest.raises(ConfigError, match=f"{key}.*ssl.key.password"):
        build_config(ssl_settings(certs, **{key: "secret"}))


def test_jvm_tls_keys_are_ignored(certs):
    config = build_config(ssl_settings(certs, **{"ssl.keymanager.algorithm": "SunX509"}))
    assert config.ignored_keys == ("ssl.keymanager.algorithm",)


def test_client_auth_values_and_the_truststore_it_needs(certs):
    with pytest.raises(ConfigError, match="ssl.client.auth"):
        build_config(ssl_settings(certs, **{"ssl.client.auth": "sometimes"}))
    with pytest.raises(ConfigError, match="ssl.truststore.location"):
        build_config(ssl_settings(certs, **{"ssl.client.auth": "required"}))
    config = build_config(ssl_settings(certs, **{"ssl.client.auth": "REQUIRED",
                                                 "ssl.truststore.location": str(certs.ca)}))
    assert config.ssl_client_auth == "required"
    assert build_server_context(config).verify_mode == ssl.CERT_REQUIRED


def test_per_listener_keys_override_for_their_listener(certs):
    config = build_config({
        "listeners": "CLIENTS://127.0.0.1:9093",
        "listener.security.protocol.map": "CLIENTS:SSL",
        "ssl.keystore.location": "/nowhere.pem",
        "listener.name.clients.ssl.keystore.location": str(certs.server_keystore),
        "listener.name.clients.ssl.key.password": KEY_PASSWORD,
        "listener.name.other.ssl.keystore.location": "/elsewhere.pem",
    })
    assert config.ssl_keystore_location == Path("/nowhere.pem")  # other listeners' default
    served = config.tls_config("CLIENTS")
    assert served.ssl_keystore_location == certs.server_keystore
    assert "listener.name.other.ssl.keystore.location" in config.ignored_keys
    build_server_context(served)


def test_a_plaintext_appliance_is_unchanged():
    config = build_config({"listeners": "PLAINTEXT://127.0.0.1:9092"})
    assert config.first_listener.security_protocol == "PLAINTEXT"
    assert config.ssl_keystore_location is None


# files that do not load: one line naming the file -----------------------------------------


def test_a_wrong_key_password_names_the_file(certs):
    config = build_config(ssl_settings(certs, **{"ssl.key.password": "wrong"}))
    with pytest.raises(ConfigError) as caught:
        build_server_context(config)
    assert str(certs.server_keystore) in str(caught.value)
    assert "ssl.key.password is wrong" in str(caught.value)


def test_a_missing_key_password_does_not_prompt(certs):
    settings = ssl_settings(certs)
    del settings["ssl.key.password"]
    with pytest.raises(ConfigError, match="ssl.key.password is not set"):
        build_server_context(build_config(settings))


def test_a_file_that_is_not_pem_names_the_file(certs, tmp_path):
    bogus = tmp_path / "keystore.jks"
    bogus.write_bytes(b"\xfe\xed\xfe\xed binary")
    config = build_config(ssl_settings(certs, **{"ssl.keystore.location": str(bogus)}))
    with pytest.raises(ConfigError, match=f"{bogus}: not a PEM file"):
        build_server_context(config)
    missing = tmp_path / "missing.pem"
    config = build_config(ssl_settings(certs, **{"ssl.keystore.location": str(missing)}))
    with pytest.raises(ConfigError, match="No such file"):
        build_server_context(config)


def test_a_bad_truststore_names_its_key(certs, tmp_path):
    bogus = tmp_path / "ca.txt"
    bogus.write_text("not a certificate")
    config = build_config(ssl_settings(certs, **{"ssl.client.auth": "required",
                                                 "ssl.truststore.location": str(bogus)}))
    with pytest.raises(ConfigError, match=f"ssl.truststore.location.*{bogus}"):
        build_server_context(config)


def test_inline_keystore_loads(certs):
    key = (certs.directory / "server.enc.key").read_text()
    config = build_config({"listeners": "SSL://127.0.0.1:9093",
                           "ssl.keystore.key": key,
                           "ssl.keystore.certificate.chain": certs.server_cert.read_text(),
                           "ssl.key.password": KEY_PASSWORD,
                           "ssl.truststore.certificates": certs.ca.read_text()})
    build_server_context(config)


# the principal -------------------------------------------------------------------------


def test_the_principal_is_the_rfc2253_subject():
    subject = ((("countryName", "US"),), (("organizationName", "Example, Inc."),),
               (("organizationalUnitName", "eng"),), (("commonName", "alice"),))
    assert principal_of({"subject": subject}) == "User:CN=alice,OU=eng,O=Example\\, Inc.,C=US"
    assert principal_of({}) == ANONYMOUS
    assert principal_of(None) == ANONYMOUS


def test_multi_valued_rdns_special_characters_and_email():
    subject = ((("domainComponent", "com"),), (("domainComponent", "example"),),
               (("commonName", " lead#+x "), ("userId", "42")),
               (("emailAddress", "a@b.c"),))
    assert rfc2253(subject) == ("1.2.840.113549.1.9.1=#1605614062 2e63".replace(" ", "")
                                + ",CN=\\ lead#\\+x\\ +UID=42,DC=example,DC=com")


# serving: handshakes, principal and reload, fetch bytes through TLS -----------------------


def client_context(certs, *, with_cert=False):
    context = ssl.create_default_context(cafile=str(certs.ca))
    if with_cert:
        context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    return context


async def _tls_server(context, on_connection):
    class Protocol(asyncio.Protocol):
        def connection_made(self, transport):
            on_connection(transport)

    server = await asyncio.get_running_loop().create_server(Protocol, "127.0.0.1", 0,
                                                            ssl=context)
    return server, server.sockets[0].getsockname()[1]


def test_reload_serves_the_new_certificate_and_keeps_the_old_on_failure(certs):
    config = build_config(ssl_settings(certs))
    tls = ServerTls(config)

    async def serial_seen(port):
        _, writer = await asyncio.open_connection("127.0.0.1", port,
                                                  ssl=client_context(certs),
                                                  server_hostname="localhost")
        cert = writer.get_extra_info("peercert")
        writer.close()
        return int(cert["serialNumber"], 16)

    async def scenario():
        server, port = await _tls_server(tls.context, lambda t: None)
        async with server:
            assert await serial_seen(port) == 1001
            new_keystore, _ = server_keystore(certs.directory, "renewed", serial=1002)
            os.replace(new_keystore, certs.directory / "live.pem")
            tls.config = build_config(ssl_settings(
                certs, **{"ssl.keystore.location": str(certs.directory / "live.pem")}))
            assert tls.reload()
            assert await serial_seen(port) == 1002
            (certs.directory / "live.pem").write_text("garbage")
            assert not tls.reload()
            assert await serial_seen(port) == 1002

    asyncio.run(scenario())


def test_a_client_certificate_gives_the_principal(certs):
    config = build_config(ssl_settings(certs, **{"ssl.client.auth": "requested",
                                                 "ssl.truststore.location": str(certs.ca)}))
    tls = ServerTls(config)
    seen = []

    async def scenario():
        server, port = await _tls_server(
            tls.context, lambda t: seen.append(principal_of(t.get_extra_info("peercert"))))
        async with server:
            for with_cert in (True, False):
                _, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=client_context(certs, with_cert=with_cert),
                    server_hostname="localhost")
                await asyncio.sleep(0.05)
                writer.close()

    asyncio.run(scenario())
    assert seen == [f"User:{certs.client_subject}", ANONYMOUS]


def _fetch_through_tls(certs, path, regions, *, slow_reader=False):
    """Serve `regions` of `path` through write_through_tls; return what a client read."""
    config = build_config(ssl_settings(certs))
    tls = ServerTls(config)
    total = sum(length for _, length in regions)
    errors = []

    async def scenario():
        fd = os.open(path, os.O_RDONLY)
        paused = asyncio.Event()
        paused.set()

        class Protocol(asyncio.Protocol):
            def connection_made(self, transport):
                transport.set_write_buffer_limits(high=64 * 1024)
                self.task = asyncio.ensure_future(self.send(transport))

            def pause_writing(self):
                paused.clear()

            def resume_writing(self):
                paused.set()

            async def send(self, transport):
                try:
                    await write_through_tls(
                        transport, [b"head"] + [FileRegion(fd, o, n) for o, n in regions],
                        paused.wait)
                except Exception as exc:  # noqa: BLE001 (reported to the test)
                    errors.append(exc)
                    transport.close()

        server = await asyncio.get_running_loop().create_server(Protocol, "127.0.0.1", 0,
                                                                ssl=tls.context)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_context(certs), server_hostname="localhost")
            got = bytearray()
            try:
                while len(got) < total + 4:
                    data = await asyncio.wait_for(reader.read(65536), 10)
                    if not data:
                        break
                    got += data
                    if slow_reader:
                        await asyncio.sleep(0.001)
            finally:
                writer.close()
                os.close(fd)
        return bytes(got)

    return asyncio.run(scenario()), errors


def test_fetch_regions_arrive_byte_for_byte_with_a_slow_reader(certs, tmp_path):
    path = tmp_path / "segment.log"
    content = os.urandom(3 * PIECE_BYTES + 12345)
    path.write_bytes(content)
    regions = [(7, 100), (1000, 2 * PIECE_BYTES + 5), (len(content) - 999, 999)]
    got, errors = _fetch_through_tls(certs, path, regions, slow_reader=True)
    assert errors == []
    assert got == b"head" + b"".join(content[o:o + n] for o, n in regions)


def test_a_region_past_the_end_of_the_file_is_a_short_read(certs, tmp_path):
    path = tmp_path / "segment.log"
    path.write_bytes(b"x" * 1000)
    got, errors = _fetch_through_tls(certs, path, [(500, 2000)])
    assert len(errors) == 1 and isinstance(errors[0], ShortRead)
    assert got == b"head" + b"x" * 500


def test_a_plaintext_client_on_a_tls_server_fails_the_handshake(certs):
    tls = ServerTls(build_config(ssl_settings(certs)))
    made = []

    async def scenario():
        server, port = await _tls_server(tls.context, made.append)
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"\x00\x00\x00\x10" + b"\x00" * 16)
            data = await asyncio.wait_for(reader.read(100), 10)
            writer.close()
            return data

    data = asyncio.run(scenario())
    assert not made  # the application never saw the connection
    assert not data.startswith(b"\x00\x00")  # a TLS alert at most, never a Kafka answer
