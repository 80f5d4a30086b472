"""SASL mechanisms, server side and sans-IO: a token in, a token out, until complete.

Each mechanism is an object a connection drives with :meth:`respond` (one SaslAuthenticate
token in, the token to answer out) until ``complete`` is true; ``username`` then names the
authenticated user. A token that fails authentication, or does not follow the mechanism's
grammar, raises :class:`SaslFailure` whose message is safe to send to the client (it never
says whether the user exists). Credentials come from a lookup the caller passes in, nonces
from the caller too: nothing here reads a file, a clock or a random source.
"""

from __future__ import annotations

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)


class SaslFailure(Exception):
    """Authentication failed; the message is what the client is told."""
