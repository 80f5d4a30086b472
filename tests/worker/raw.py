"""A raw protocol client for tests: our sans-IO ClientConnection over a blocking socket."""

from __future__ import annotations

import socket

from klog.protocol.client import NEED_DATA, ClientConnection


class RawClient:
    def __init__(self, port: int, timeout_s: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.codec = ClientConnection(client_id="raw-test")

    def send(self, module, version, **fields) -> int:
        correlation_id, data = self.codec.send_request(module.SPEC.key, version,
                                                       module.Request(**fields))
        self.sock.sendall(data)
        return correlation_id

    def receive(self):
        while True:
            event = self.codec.next_response()
            if event is not NEED_DATA:
                return event[1]
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.codec.receive_data(chunk)

    def call(self, module, version, **fields):
        self.send(module, version, **fields)
        return self.receive()

    def close(self):
        self.sock.close()
