"""The SASL mechanisms alone (klog/protocol/sasl): RFC 7677's SCRAM-SHA-256 vector, PLAIN's
grammar, and klog's client against klog's server for both SCRAM hashes."""

from __future__ import annotations

import base64

import pytest

from klog.protocol.sasl import PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, SaslFailure
from klog.protocol.sasl.client import new_client
from klog.protocol.sasl.plain import PlainServer
from klog.protocol.sasl.scram import ScramServer, make_credential

# RFC 7677 section 3
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server(password: str = "pencil") -> ScramServer:
    credential = make_credential(SCRAM_SHA_256, password, SALT, 4096)
    users = {"user": credential}
    return ScramServer(SCRAM_SHA_256, users.get, SERVER_NONCE)


def test_rfc7677_vector_server_side():
    server = rfc_server()
    assert server.respond(CLIENT_FIRST) == SERVER_FIRST
    assert server.respond(CLIENT_FINAL) == SERVER_FINAL
    assert server.complete and server.username == "user"


def test_rfc7677_vector_client_side():
    client = new_client(SCRAM_SHA_256, "user", "pencil", CLIENT_NONCE)
    assert client.first() == CLIENT_FIRST
    assert client.respond(SERVER_FIRST) == CLIENT_FINAL
    assert client.respond(SERVER_FINAL) is None and client.complete


def test_wrong_password_fails_the_proof():
    server = rfc_server(password="not-pencil")
    server.respond(CLIENT_FIRST)
    with pytest.raises(SaslFailure, match="Invalid user credentials"):
        server.respond(CLIENT_FINAL)
    assert not server.complete


def test_unknown_user_fails_at_the_first_message():
    server = ScramServer(SCRAM_SHA_256, {}.get, SERVER_NONCE)
    with pytest.raises(SaslFailure, match="Invalid user credentials"):
        server.respond(CLIENT_FIRST)


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_klog_client_against_klog_server(mechanism):
    users = {"al,=ice": make_credential(mechanism, "s3cret é", b"0123456789abcdef", 4096)}
    server = ScramServer(mechanism, users.get, "servernonce")
    client = new_client(mechanism, "al,=ice", "s3cret é", "clientnonce")
    token = client.first()
    assert b"n=al=2C=3Dice" in token
    final = client.respond(server.respond(token))
    assert client.respond(server.respond(final)) is None
    assert server.complete and client.complete and server.username == "al,=ice"


def test_a_server_that_does_not_know_the_key_is_caught_by_the_client():
    server = rfc_server()
    client = new_client(SCRAM_SHA_256, "user", "pencil", CLIENT_NONCE)
    server.respond(client.first())
    client.respond(SERVER_FIRST)
    with pytest.raises(SaslFailure):
        client.respond(b"v=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize("token", [
    b"", b"garbage", b"\xff\xfe", b"p=tls-unique,,n=user,r=abc", b"n,,r=abc,n=user",
    b"n,,n=user", b"n,x,n=user,r=abc", b"n,,n=user,r=abc,tokenauth=true",
    b"n,a=other,n=user,r=abc", b"n,,n=us=er,r=abc",
])
def test_bad_client_first_messages_fail(token):
    with pytest.raises(SaslFailure):
        rfc_server().respond(token)


@pytest.mark.parametrize("final", [
    b"", b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",  # no proof
    CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),  # other channel binding
    CLIENT_FINAL.replace(b"hNlF$k0", b"hNlF$k1"),  # other nonce
    CLIENT_FINAL.replace(b"p=dHz", b"p=!!!"),  # bad base64
    CLIENT_FINAL[:-8] + b"AAAA",  # short proof
])
def test_bad_client_final_messages_fail(final):
    server = rfc_server()
    server.respond(CLIENT_FIRST)
    with pytest.raises(SaslFailure):
        server.respond(final)


def test_librdkafkas_repeated_client_nonce_is_accepted_and_nothing_else():
    """librdkafka before 2.6.1 (kcat's 2.0.2) answers r=<client nonce><server's r>; Kafka
    3.8.1 accepts it, and so does klog. The proof still covers the message as sent."""
    import hashlib
    import hmac

    def final_with(nonce: bytes) -> bytes:
        without_proof = b"c=biws,r=" + nonce
        auth = b",".join((CLIENT_FIRST[3:], SERVER_FIRST, without_proof))
        salted = hashlib.pbkdf2_hmac("sha256", b"pencil", SALT, 4096)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        signature = hmac.digest(hashlib.sha256(client_key).digest(), auth, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return without_proof + b",p=" + base64.b64encode(proof)

    combined = SERVER_FIRST[2:SERVER_FIRST.index(b",")]
    server = rfc_server()
    server.respond(CLIENT_FIRST)
    server.respond(final_with(CLIENT_NONCE.encode() + combined))
    assert server.complete
    for other in (b"x" + combined, combined + CLIENT_NONCE.encode(), CLIENT_NONCE.encode()):
        server = rfc_server()
        server.respond(CLIENT_FIRST)
        with pytest.raises(SaslFailure, match="nonce differs"):
            server.respond(final_with(other))


def test_a_third_scram_message_fails():
    server = rfc_server()
    server.respond(CLIENT_FIRST)
    server.respond(CLIENT_FINAL)
    with pytest.raises(SaslFailure):
        server.respond(CLIENT_FINAL)


def test_kafka_extensions_other_than_tokenauth_are_ignored():
    server = rfc_server()
    server.respond(CLIENT_FIRST + b",tokenauth=false,foo=bar")


def plain(users):
    return PlainServer(lambda user, password: users.get(user) == password)


def test_plain_accepts_the_right_password_with_and_without_authzid():
    for token in (b"\0alice\0alice-secret", b"alice\0alice\0alice-secret"):
        server = plain({"alice": "alice-secret"})
        assert server.respond(token) == b""
        assert server.complete and server.username == "alice"
    assert new_client(PLAIN, "alice", "alice-secret", "").first() == b"\0alice\0alice-secret"


@pytest.mark.parametrize("token", [
    b"\0alice\0wrong", b"\0bob\0alice-secret", b"bob\0alice\0alice-secret", b"\0\0x",
    b"\0alice\0", b"alice-secret", b"\0alice\0alice-secret\0", b"\xff\0alice\0alice-secret",
])
def test_plain_refuses(token):
    server = plain({"alice": "alice-secret"})
    with pytest.raises(SaslFailure):
        server.respond(token)
    assert not server.complete
