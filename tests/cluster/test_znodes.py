"""The znodes' formats (cluster/znodes.py): what Kafka's tools and brokers read, written as
they write it."""

import orjson
import pytest

from cluster import znodes


def test_the_assignment_znode_records_a_move_as_kip_455_does():
    assignment = znodes.TopicAssignment({0: (200, 300, 400, 100), 1: (100,)}, {0: (400,)},
                                        {0: (100,)})
    raw = orjson.loads(assignment.encode())
    assert raw == {"version": 2, "partitions": {"0": [200, 300, 400, 100], "1": [100]},
                   "adding_replicas": {"0": [400]}, "removing_replicas": {"0": [100]}}
    assert znodes.TopicAssignment.decode(assignment.encode(), "/t") == assignment
    request = znodes.ReassignmentRequest((("t", 0, (1, 2)),))
    assert orjson.loads(request.encode()) == {
        "version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}]}
    with pytest.raises(znodes.ZnodeError, match="not a reassignment request"):
        znodes.ReassignmentRequest.decode(b'{"partitions": [{"topic": "t"}]}')
