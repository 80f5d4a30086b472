"""What a client's protocol object asks its I/O layer to send, and nothing more.

The producer's and consumer's state machines return :class:`Outgoing` requests from their
``poll(now_ms)``; the I/O layer (blocking or asyncio) sends each to its node at the version
the connection negotiated, and hands the answer back with ``on_response(outgoing, body,
now_ms)`` or a lost request with ``on_failure(outgoing, error, now_ms)``. ``node=None`` means
"any broker" (bootstrap, or any connected one). ``channel`` names a separate connection to
the same node: a broker answers a connection's requests in order, so a long-polling Fetch
would hold up a ListOffsets queued behind it; fetches travel on their own channel, and so do
the group requests a coordinator holds back (JoinGroup, SyncGroup), which also get their own
``timeout_ms`` (a JoinGroup may wait a whole rebalance timeout for the other members).
:func:`choose_versions` is the version negotiation both I/O flavours run once per connection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from klog.errors import KlogError, raise_for
from klog.protocol.apis import API_BY_KEY, add_partitions_to_txn, api_versions
from klog.protocol.error_codes import ErrorCode

ANY_NODE = None


@dataclass(slots=True, eq=False)
class Outgoing:
    node: int | None
    api: ModuleType  # a klog.protocol.apis module: api.SPEC.key, api.Request
    body: Any  # the request body, or a function returning it (built outside any lock)
    context: Any = None  # whatever the protocol object needs to handle the answer
    expect_response: bool = True
    channel: str = ""  # "": the node's main connection; "fetch": the long-poll one
    timeout_ms: int | None = None  # None: request_timeout_ms; JoinGroup waits for a rebalance

    def build_body(self) -> Any:
        body = self.body
        return body() if isinstance(body, Callable) else body  # type: ignore[arg-type]


# ApiVersions as a client sends it: v3, whose answer carries the broker's supported features
# (a klog broker announces itself there: klog.metadata.note_appliance_broker)
API_VERSIONS_VERSION = 3
CLIENT_SOFTWARE = ("klog", "1.0")


def api_versions_request():
    return api_versions.Request(client_software_name=CLIENT_SOFTWARE[0],
                                client_software_version=CLIENT_SOFTWARE[1])


def api_versions_retry(answer: Any) -> int | None:
    """The version to ask ApiVersions again at, when a broker older than v3 answered
    UNSUPPORTED_VERSION (KIP-511: its answer lists the versions it serves), else None."""
    if answer.error_code != ErrorCode.UNSUPPORTED_VERSION:
        return None
    ours = [a for a in answer.api_keys if a.api_key == api_versions.KEY]
    return min(ours[0].max_version, API_VERSIONS_VERSION) if ours else 0

# APIs whose newer versions only brokers send (a module's CLIENT_MAX_VERSION): a client
# stays below, as Kafka's own (AddPartitionsToTxn v4+ is KIP-890's broker-to-broker form)
CLIENT_MAX = {add_partitions_to_txn.KEY: add_partitions_to_txn.CLIENT_MAX_VERSION}


def choose_versions(answer: Any, broker: str) -> dict[int, int]:
    """From an ApiVersions answer: the highest version of each API both sides speak (a
    client's, never a broker-only version)."""
    raise_for(answer.error_code, broker=broker)
    theirs = {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}
    chosen = {}
    for key, spec in API_BY_KEY.items():
        if key in theirs:
            low = max(spec.served[0], theirs[key][0])
            high = min(spec.served[1], theirs[key][1], CLIENT_MAX.get(key, spec.served[1]))
            if low <= high:
                chosen[key] = high
    return chosen


def version_of(versions: dict[int, int], api_key: int, broker: str) -> int:
    """The negotiated version of ``api_key``; BrokerUnavailableError if there is none."""
    from klog.errors import BrokerUnavailableError

    try:
        return versions[api_key]
    except KeyError:
        name = API_BY_KEY[api_key].name if api_key in API_BY_KEY else str(api_key)
        raise BrokerUnavailableError(
            f"{broker} does not serve {name} in a version we speak") from None


def deliver(core, events, now_ms: int) -> None:
    """Hand each ``(request, answer)`` an I/O layer collected to the protocol object: a body
    goes to ``on_response``, a KlogError (the request was lost) to ``on_failure``."""
    for request, answer in events:
        if isinstance(answer, KlogError):
            core.on_failure(request, answer, now_ms)
        else:
            core.on_response(request, answer, now_ms)
