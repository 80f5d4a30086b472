"""AlterUserScramCredentials' checks, as Kafka makes them (KIP-554), as a pure function.

Per user, the first problem found answers for all of that user's alterations, and none of them
is applied (a user's alterations are all or nothing); other users are not affected:

- an empty name: UNACCEPTABLE_CREDENTIAL "Username must not be empty";
- a mechanism other than SCRAM-SHA-256 (1) and SCRAM-SHA-512 (2): UNSUPPORTED_SASL_MECHANISM;
- iterations below 4096 or above 16384: UNACCEPTABLE_CREDENTIAL;
- the same user and mechanism twice in the request: DUPLICATE_RESOURCE;
- a deletion of a credential the user does not have: RESOURCE_NOT_FOUND.

An upsertion carries the salt and the salted password; StoredKey and ServerKey are derived
here, so only they are ever stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.scram_credentials import ScramChange, Users
from klog.protocol.error_codes import ErrorCode
from klog.protocol.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from klog.protocol.sasl.scram import MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted

# Kafka's ScramMechanism type numbers
MECHANISM_BY_TYPE = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}
TYPE_BY_MECHANISM = {name: code for code, name in MECHANISM_BY_TYPE.items()}


@dataclass(frozen=True)
class Outcome:
    """Per user (in the order of the request): its error (NONE, or why nothing of it is
    applied); and the changes to apply, those of the users without error."""

    errors: dict[str, tuple[ErrorCode, str | None]]
    changes: list[ScramChange]


def _problem(name: str, mechanism: int, iterations: int | None):
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISM_BY_TYPE:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if iterations is not None and iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if iterations is not None and iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


def plan(deletions, upsertions, users: Users) -> Outcome:
    """`deletions` have `.name`, `.mechanism`; `upsertions` also `.iterations`, `.salt`,
    `.salted_password` (the request's structs); `users` are the credentials in force."""
    order = list(dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions]))
    errors: dict[str, tuple[ErrorCode, str | None]] = {}
    seen: set[tuple[str, int]] = set()
    for item in [*deletions, *upsertions]:
        problem = _problem(item.name, item.mechanism, getattr(item, "iterations", None))
        if problem is None and (item.name, item.mechanism) in seen:
            problem = (ErrorCode.DUPLICATE_RESOURCE,
                       "A user credential cannot be altered twice in the same request")
        seen.add((item.name, item.mechanism))
        if problem is not None:
            errors.setdefault(item.name, problem)
    for d in deletions:
        if d.name not in errors and MECHANISM_BY_TYPE[d.mechanism] not in users.get(d.name, {}):
            errors[d.name] = (ErrorCode.RESOURCE_NOT_FOUND,
                              "Attempt to delete a user credential that does not exist")
    changes = [ScramChange(d.name, MECHANISM_BY_TYPE[d.mechanism], None)
               for d in deletions if d.name not in errors]
    changes += [ScramChange(u.name, MECHANISM_BY_TYPE[u.mechanism], credential_from_salted(
        MECHANISM_BY_TYPE[u.mechanism], u.salted_password, u.salt, u.iterations))
        for u in upsertions if u.name not in errors]
    return Outcome({name: errors.get(name, (ErrorCode.NONE, None)) for name in order}, changes)
