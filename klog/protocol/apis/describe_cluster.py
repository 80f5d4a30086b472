"""DescribeCluster (key 60, KIP-700): the cluster id, the controller and the brokers with their
racks. kafka-python's `describe_cluster` sends it (and falls back to Metadata when it is not
advertised); librdkafka's DescribeCluster sends Metadata instead. v1 adds the endpoint type
(KIP-919: 2 asks for the controllers, which a ZooKeeper-mode cluster does not expose)."""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT8, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 60
BROKERS, CONTROLLERS = 1, 2  # EndpointType


class DescribeClusterRequest(Message, versions="0-1", flexible="0+"):
    include_cluster_authorized_operations = Field(BOOL)
    endpoint_type = Field(INT8, "1+", default=BROKERS)


class DescribeClusterBroker(Struct):
    broker_id = Field(INT32)
    host = Field(STRING)
    port = Field(INT32)
    rack = Field(STRING, nullable="0+", default=None)


class DescribeClusterResponse(Message, versions="0-1", flexible="0+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    endpoint_type = Field(INT8, "1+", default=BROKERS)
    cluster_id = Field(STRING)
    controller_id = Field(INT32, default=-1)
    brokers = Field(Array(DescribeClusterBroker))
    cluster_authorized_operations = Field(INT32, default=-2147483648)


Request, Response = DescribeClusterRequest, DescribeClusterResponse


def error_response(request: object, version: int, code: int,
                   message: str | None = None) -> DescribeClusterResponse:
    endpoint = getattr(request, "endpoint_type", BROKERS)
    return DescribeClusterResponse(error_code=code, error_message=message,
                                   endpoint_type=endpoint, cluster_id="", brokers=[])
