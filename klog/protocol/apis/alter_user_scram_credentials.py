"""AlterUserScramCredentials (key 51, KIP-554): remove and add (or replace) users' SCRAM
credentials. The client sends the salt and the salted password (PBKDF2 of the password), never
the password; the broker derives StoredKey and ServerKey from them. One result per user named
in the request.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BYTES, INT8, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 51


class ScramCredentialDeletion(Struct):
    name = Field(STRING)
    mechanism = Field(INT8)


class ScramCredentialUpsertion(Struct):
    name = Field(STRING)
    mechanism = Field(INT8)
    iterations = Field(INT32)
    salt = Field(BYTES)
    salted_password = Field(BYTES)


class AlterUserScramCredentialsRequest(Message, versions="0", flexible="0+"):
    # librdkafka (2.x) ends this request with one empty tag section too many; Kafka reads
    # no further than the body and never notices, so a zero byte after it is read as nothing
    TRAILING_TAGS_TOLERATED = True

    deletions = Field(Array(ScramCredentialDeletion))
    upsertions = Field(Array(ScramCredentialUpsertion))


class AlterUserScramCredentialsResult(Struct):
    user = Field(STRING)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)


class AlterUserScramCredentialsResponse(Message, versions="0", flexible="0+"):
    throttle_time_ms = Field(INT32)
    results = Field(Array(AlterUserScramCredentialsResult))


Request, Response = AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse


def error_response(request: AlterUserScramCredentialsRequest | None, version: int, code: int,
                   message: str | None = None) -> AlterUserScramCredentialsResponse | None:
    if request is None:
        return None
    users = dict.fromkeys([d.name for d in request.deletions]
                          + [u.name for u in request.upsertions])
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
        AlterUserScramCredentialsResult(user=name, error_code=code, error_message=message)
        for name in users])
