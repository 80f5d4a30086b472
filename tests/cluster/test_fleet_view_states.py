"""Partition states are decoded once per distinct content (fleet_view._decoded_state): a
pass over 10,000 unchanged states must not decode them all again, and a state that does not
parse must still be reported naming its znode."""

import pytest

from cluster import znodes
from cluster.fleet_view import _decoded_state


def test_equal_contents_decode_to_one_state_and_a_bad_one_names_its_path():
    data = znodes.PartitionState(101, 3, (101, 201), 7).encode()
    first = _decoded_state(data, "/brokers/topics/t/partitions/0/state")
    again = _decoded_state(bytes(data), "/brokers/topics/t/partitions/1/state")
    assert first == znodes.PartitionState(101, 3, (101, 201), 7)
    assert again is first
    with pytest.raises(znodes.ZnodeError, match="/brokers/topics/t/partitions/2/state"):
        _decoded_state(b'{"leader": 1}', "/brokers/topics/t/partitions/2/state")
