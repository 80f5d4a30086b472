"""The per-connection SASL state machine (appliance/workers/authentication.py), fed requests
decoded from real bytes, without sockets: every path's action and answer."""

from __future__ import annotations

import pytest

from appliance.sasl_config import SaslSettings
from appliance.scram_credentials import ScramCredentialFile, write_users
from appliance.workers.authentication import Action, Authenticator
from klog.protocol.apis import api_versions, metadata, sasl_authenticate, sasl_handshake
from klog.protocol.client import ClientConnection
from klog.protocol.error_codes import ErrorCode
from klog.protocol.sasl.client import new_client
from klog.protocol.sasl.scram import make_credential
from klog.protocol.server import ServerConnection

SETTINGS = SaslSettings(("PLAIN", "SCRAM-SHA-512"), {"alice": "alice-secret"})


class Wire:
    """Requests through our client codec and server codec, as a connection would see them."""

    def __init__(self):
        self.client = ClientConnection(client_id="t")
        self.server = ServerConnection()

    def request(self, module, version, **fields):
        _, data = self.client.send_request(module.SPEC.key, version, module.Request(**fields))
        self.server.receive_data(data)
        return self.server.next_request()


@pytest.fixture
def auth(tmp_path):
    path = tmp_path / "scram.json"
    write_users(path, {"bob": {"SCRAM-SHA-512": make_credential(
        "SCRAM-SHA-512", "bob-secret", b"salt" * 4, 4096)}})
    return Authenticator(SETTINGS, ScramCredentialFile(path), nonce=lambda: "servernonce")


def test_api_versions_is_dispatched_as_usual(auth):
    assert auth.receive(Wire().request(api_versions, 0)) is None


@pytest.mark.parametrize("version", [0, 1, 2])
def test_plain_success(auth, version):
    wire = Wire()
    outcome = auth.receive(wire.request(sasl_handshake, 1, mechanism="PLAIN"))
    assert outcome.action is Action.ANSWER and outcome.body.mechanisms == ["PLAIN",
                                                                           "SCRAM-SHA-512"]
    outcome = auth.receive(wire.request(sasl_authenticate, version,
                                        auth_bytes=b"\0alice\0alice-secret"))
    assert outcome.action is Action.ANSWER and outcome.body.error_code == 0
    assert auth.authenticated and auth.principal == "User:alice"


def test_scram_success(auth):
    wire = Wire()
    auth.receive(wire.request(sasl_handshake, 1, mechanism="SCRAM-SHA-512"))
    client = new_client("SCRAM-SHA-512", "bob", "bob-secret", "c")
    token = client.first()
    while token is not None:
        outcome = auth.receive(wire.request(sasl_authenticate, 1, auth_bytes=token))
        assert outcome.action is Action.ANSWER, outcome.reason
        token = client.respond(outcome.body.auth_bytes)
    assert auth.authenticated and auth.principal == "User:bob"


@pytest.mark.parametrize("token", [b"\0alice\0wrong", b"\0nobody\0alice-secret", b"junk"])
def test_plain_failure_then_everything_is_dropped(auth, token):
    wire = Wire()
    auth.receive(wire.request(sasl_handshake, 1, mechanism="PLAIN"))
    outcome = auth.receive(wire.request(sasl_authenticate, 1, auth_bytes=token))
    assert outcome.action is Action.FAIL
    assert outcome.body.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert outcome.body.error_message
    assert not auth.authenticated and auth.principal is None
    assert auth.receive(wire.request(metadata, 1, topics=[])).action is Action.DROP


def test_unsupported_mechanism_fails(auth):
    outcome = auth.receive(Wire().request(sasl_handshake, 1, mechanism="SCRAM-SHA-256"))
    assert outcome.action is Action.FAIL
    assert outcome.body.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert outcome.body.mechanisms == ["PLAIN", "SCRAM-SHA-512"]


@pytest.mark.parametrize("first", ["metadata", "authenticate-after-handshake-v0"])
def test_requests_that_close(auth, first):
    wire = Wire()
    if first == "metadata":
        request = wire.request(metadata, 1, topics=[])
    else:
        assert auth.receive(wire.request(sasl_handshake, 0, mechanism="PLAIN")).body.error_code == 0
        request = wire.request(sasl_authenticate, 1, auth_bytes=b"\0alice\0alice-secret")
    assert auth.receive(request).action is Action.CLOSE


def test_out_of_turn_is_an_illegal_state(auth):
    wire = Wire()
    outcome = auth.receive(wire.request(sasl_authenticate, 1, auth_bytes=b""))
    assert outcome.action is Action.ANSWER_AND_CLOSE
    assert outcome.body.error_code == ErrorCode.ILLEGAL_SASL_STATE
    auth2 = Authenticator(SETTINGS, auth._scram)
    auth2.receive(wire.request(sasl_handshake, 1, mechanism="PLAIN"))
    outcome = auth2.receive(wire.request(sasl_handshake, 1, mechanism="PLAIN"))
    assert outcome.action is Action.ANSWER_AND_CLOSE
    assert outcome.body.error_code == ErrorCode.ILLEGAL_SASL_STATE
