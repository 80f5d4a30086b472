"""The declared interfaces hold: what a worker may ask of its control plane (`ControlPlane`), what
a handler may use of its worker (`HandlerContext`), and what a Fetch reads of a log, owned or
not (`ReadableLog`). A class that dropped or renamed a
member would fail here before a handler failed in production."""

import ast
import inspect
import textwrap

import pytest

from appliance.control.client import ControlPlaneClient
from appliance.control.interface import ControlPlane
from appliance.segments.log import PartitionLog
from appliance.segments.readable import ReadableLog
from appliance.workers.handler_context import HandlerContext
from appliance.workers.replication.partition import Partition
from appliance.workers.shared_state import RemoteLog
from appliance.workers.worker import Worker


def _protocol_members(protocol) -> set[str]:
    declared = set(protocol.__annotations__)
    declared |= {name for name, value in vars(protocol).items()
                 if (callable(value) or isinstance(value, property)) and not name.startswith("_")}
    return declared


def _instance_attributes(cls) -> set[str]:
    """Names the class assigns to `self.` in its __init__, plus its class-level members."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    assigned = {node.attr for node in ast.walk(tree)
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "self" and isinstance(node.ctx, ast.Store)}
    return assigned | {name for name in dir(cls) if not name.startswith("_")}


@pytest.mark.parametrize(("implementation", "protocol"), [
    (ControlPlaneClient, ControlPlane),
    (Worker, HandlerContext),
    (PartitionLog, ReadableLog),  # the owner's log
    (Partition, ReadableLog),  # the owner's replica, which a Fetch reads
    (RemoteLog, ReadableLog),  # another worker's, read through shm
])
def test_implementation_has_every_declared_member(implementation, protocol):
    missing = _protocol_members(protocol) - _instance_attributes(implementation)
    assert not missing, f"{implementation.__name__} lacks {sorted(missing)} of {protocol.__name__}"


def test_protocols_declare_what_they_promise():
    assert {"create_topic", "delete_topic", "create_partitions", "topic", "topics",
            "allocate_producer_id", "add_listener", "add_reload_listener",
            "cluster_id"} <= _protocol_members(ControlPlane)
    assert {"partitions", "control", "absent_partition_error", "readable_log",
            "now_ms"} <= _protocol_members(HandlerContext)
    assert {"high_watermark", "log_start_offset", "read"} <= _protocol_members(ReadableLog)
