"""The client's one socket module: a blocking connection to one broker.

All protocol state (correlation ids, the in-flight queue, framing limits) lives in the sans-IO
`ClientConnection`; this module only moves its bytes over a socket. Version negotiation is
done once per connection with ApiVersions, as every Kafka client does.
"""

from __future__ import annotations

import contextlib
import socket

from klog.errors import BrokerUnavailableError, raise_for
from klog.protocol.apis import API_BY_KEY, api_versions
from klog.protocol.client import NEED_DATA, ClientConnection

RECV_BYTES = 1 << 20


class BrokerConnection:
    """A blocking request/response connection; not thread-safe."""

    def __init__(self, host: str, port: int, *, client_id: str = "klog",
                 timeout_s: float = 30.0):
        self.address = f"{host}:{port}"
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise BrokerUnavailableError(f"cannot connect to {self.address}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.codec = ClientConnection(client_id=client_id)
        self.versions = self._negotiate()

    def _negotiate(self) -> dict[int, int]:
        """The highest version of each API that both we and the broker speak."""
        answer = self.request(api_versions.SPEC.key, 0, api_versions.Request())
        raise_for(answer.error_code, broker=self.address)
        theirs = {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}
        chosen = {}
        for key, spec in API_BY_KEY.items():
            if key not in theirs:
                continue
            low = max(spec.served[0], theirs[key][0])
            high = min(spec.served[1], theirs[key][1])
            if low <= high:
                chosen[key] = high
        return chosen

    def version_of(self, api_key: int) -> int:
        try:
            return self.versions[api_key]
        except KeyError:
            name = API_BY_KEY[api_key].name if api_key in API_BY_KEY else str(api_key)
            raise BrokerUnavailableError(
                f"{self.address} does not serve {name} in a version we speak") from None

    def request(self, api_key: int, version: int, body):
        """Send one request and wait for its response body."""
        correlation_id, data = self.codec.send_request(api_key, version, body)
        try:
            self.sock.sendall(data)
            while True:
                event = self.codec.next_response()
                if event is not NEED_DATA:
                    return event[1]
                chunk = self.sock.recv(RECV_BYTES)
                if not chunk:
                    raise BrokerUnavailableError(f"{self.address} closed the connection")
                self.codec.receive_data(chunk)
        except OSError as exc:
            self.close()
            raise BrokerUnavailableError(f"{self.address}: {exc}") from None

    def call(self, module, **fields):
        """Build `module.Request(**fields)` at the negotiated version and return the answer."""
        return self.request(module.SPEC.key, self.version_of(module.SPEC.key),
                            module.Request(**fields))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """'host:port[,host:port]' into pairs, with a clear error for anything else."""
    pairs = []
    for item in servers.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        pairs.append((host.strip("[]"), int(port)))
    if not pairs:
        raise ValueError("no bootstrap server given")
    return pairs


def connect_any(servers: str, **kwargs) -> BrokerConnection:
    """Connect to the first bootstrap server that answers."""
    errors = []
    for host, port in parse_bootstrap(servers):
        try:
            return BrokerConnection(host, port, **kwargs)
        except BrokerUnavailableError as exc:
            errors.append(str(exc))
    raise BrokerUnavailableError("; ".join(errors))
