"""DescribeUserScramCredentials (key 50, KIP-554): the SCRAM mechanisms and iteration counts of
users, never a salt or a key. ``users = None`` (or empty) asks for every user with a
credential. Mechanism codes are Kafka's ScramMechanism: 0 UNKNOWN, 1 SCRAM-SHA-256,
2 SCRAM-SHA-512.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT8, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 50


class UserName(Struct):
    name = Field(STRING)


class DescribeUserScramCredentialsRequest(Message, versions="0", flexible="0+"):
    users = Field(Array(UserName), nullable="0+")


class CredentialInfo(Struct):
    mechanism = Field(INT8)
    iterations = Field(INT32)


class DescribeUserScramCredentialsResult(Struct):
    user = Field(STRING)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    credential_infos = Field(Array(CredentialInfo))


class DescribeUserScramCredentialsResponse(Message, versions="0", flexible="0+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    results = Field(Array(DescribeUserScramCredentialsResult))


Request, Response = DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse


def error_response(request: object, version: int, code: int,
                   message: str | None = None) -> DescribeUserScramCredentialsResponse:
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=code,
                                                error_message=message, results=[])
