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


def test_a_broker_registration_lists_every_endpoint_as_kafka_writes_it():
    endpoints = (("CLIENT", "PLAINTEXT", "10.0.0.1", 9092),
                 ("REPLICATION", "SASL_SSL", "broker1.internal", 9192))
    raw = orjson.loads(znodes.BrokerRegistration(100, "10.0.0.1", 9092, "r1",
                                                 endpoints).encode())
    assert raw["endpoints"] == ["CLIENT://10.0.0.1:9092", "REPLICATION://broker1.internal:9192"]
    assert raw["listener_security_protocol_map"] == {"CLIENT": "PLAINTEXT",
                                                     "REPLICATION": "SASL_SSL"}
    assert (raw["host"], raw["port"]) == ("10.0.0.1", 9092)  # the PLAINTEXT one
    decoded = znodes.BrokerRegistration.decode(100, orjson.dumps(raw), "/brokers/ids/100")
    assert decoded.endpoints == endpoints


def test_without_a_plaintext_endpoint_host_is_null_as_in_kafka():
    secured = (("SECURE", "SASL_SSL", "::1", 9093),)
    data = znodes.BrokerRegistration(1, "::1", 9093, None, secured).encode()
    raw = orjson.loads(data)
    assert (raw["host"], raw["port"]) == (None, -1)
    assert raw["endpoints"] == ["SECURE://[::1]:9093"]
    decoded = znodes.BrokerRegistration.decode(1, data, "/brokers/ids/1")
    assert (decoded.host, decoded.port, decoded.endpoints) == ("::1", 9093, secured)


def test_an_endpoint_less_registration_is_one_plaintext_listener():
    raw = orjson.loads(znodes.BrokerRegistration(7, "h", 9092).encode())
    assert raw["endpoints"] == ["PLAINTEXT://h:9092"]
    assert raw["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
