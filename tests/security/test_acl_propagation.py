"""The supervisor's ACLs alone (no appliance): the real ControlServer with an AclBook serving
two workers' ControlPlaneClients over socketpairs. A change asked by one worker is written to
acls.json (0600) and told to both before the asker's request returns; a new worker hears the
set before its catalog; a restart reads the file back; without an authorizer the server
answers SECURITY_DISABLED."""

from __future__ import annotations

import os
import select
import socket
import stat
import threading

import pytest

from appliance.control.catalog import Catalog
from appliance.control.client import ControlPlaneClient
from appliance.control.decisions import LocalDecider
from appliance.control.server import ControlServer
from appliance.security.acl_book import AclBook
from appliance.security.acl_file import acls_path
from appliance.security.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from appliance.security.authorizer import AuthorizerSettings, authorize
from appliance.segments.config import LogConfig
from klog.protocol.error_codes import ErrorCode

WRITE_A = AclBinding(ResourceType.TOPIC, "a", PatternType.LITERAL, "User:alice", "*",
                     Operation.WRITE, Permission.ALLOW)
READ_G = AclBinding(ResourceType.GROUP, "g", PatternType.LITERAL, "User:alice", "*",
                    Operation.READ, Permission.ALLOW)


class Supervisor:
    """A ControlServer served on a thread, as the supervisor's loop serves it."""

    def __init__(self, root, acls: AclBook | None, workers: int = 2):
        decider = LocalDecider(Catalog(root), defaults=LogConfig(), default_partitions=1,
                               worker_count=workers)
        self.server = ControlServer(decider, cluster_id="c", broker_id=0, acls=acls)
        self.clients = []
        for index in range(workers):
            ours, theirs = socket.socketpair()
            self.server.attach(index, theirs)
            client = ControlPlaneClient(ours, defaults=LogConfig(), default_partitions=1)
            client.wait_for_catalog()
            self.clients.append(client)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            channels = self.server.by_fileno()
            readable, _, _ = select.select(list(channels), [], [], 0.05)
            for fd in readable:
                self.server.on_readable(channels[fd])

    def stop(self):
        self._stop.set()
        self._thread.join()


def may_write_a(client) -> bool:
    return authorize(client.acls, AuthorizerSettings(), "User:alice", "10.0.0.1",
                     Operation.WRITE, ResourceType.TOPIC, "a")


def test_a_change_reaches_every_worker_before_the_askers_reply(tmp_path):
    supervisor = Supervisor(tmp_path, AclBook(acls_path(tmp_path)))
    first, second = supervisor.clients
    try:
        assert first.create_acls([WRITE_A, READ_G]) == (ErrorCode.NONE, None)
        assert first.acls.acls == {WRITE_A, READ_G}  # the broadcast came before the reply
        second.sock.setblocking(True)
        second.sock.settimeout(1.0)
        while second.acls.acls != {WRITE_A, READ_G}:  # the other worker, within a second
            second._receive_blocking()
        assert may_write_a(second)
        path = acls_path(tmp_path)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        error, _, removed = second.delete_acls([AclFilter(ResourceType.TOPIC)])
        assert (error, removed) == (ErrorCode.NONE, (WRITE_A,))
        assert not may_write_a(second)
        while first.acls.acls != {READ_G}:
            first._receive_blocking()
        assert not may_write_a(first)
    finally:
        supervisor.stop()
    # a restart: the file holds what was told
    assert AclBook(acls_path(tmp_path)).acls == {READ_G}


def test_a_new_worker_hears_the_acls_before_its_catalog(tmp_path):
    book = AclBook(acls_path(tmp_path))
    book.create([WRITE_A])
    supervisor = Supervisor(tmp_path, book, workers=1)
    try:
        assert supervisor.clients[0].acls.acls == {WRITE_A}
    finally:
        supervisor.stop()


def test_without_an_authorizer_the_supervisor_answers_security_disabled(tmp_path):
    supervisor = Supervisor(tmp_path, None, workers=1)
    try:
        client = supervisor.clients[0]
        assert client.create_acls([WRITE_A])[0] is ErrorCode.SECURITY_DISABLED
        assert client.delete_acls([AclFilter()])[0] is ErrorCode.SECURITY_DISABLED
        assert not acls_path(tmp_path).exists()
    finally:
        supervisor.stop()


def test_a_file_that_cannot_be_written_changes_nothing(tmp_path, monkeypatch):
    book = AclBook(acls_path(tmp_path))
    book.create([WRITE_A])

    def full_disk(path, acls):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("appliance.security.acl_book.write_acls", full_disk)
    with pytest.raises(OSError):
        book.create([READ_G])
    assert book.acls == {WRITE_A}
