"""ApiVersions (key 18): the client asks which (api, version) ranges the broker serves.

v3 is the only flexible message klog serves (compact types, tagged fields), because it saves
librdkafka a round trip; its response header is nevertheless always v0. A request at a version
we do not serve (kafka-python opens with v4) is answered in the v0 layout with
UNSUPPORTED_VERSION and the full api list, so the client can retry with a version we serve
(KIP-511). That rule lives in :mod:`klog.protocol.server`; this module only declares fields.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 18
# klog's supported feature (v3+): its versions are how many node ids one appliance spans
# (node id = broker.id * 100 + worker index), which tells klog's client which workers share an
# appliance (klog/metadata.py). Kafka clients ignore features they do not know.
APPLIANCE_FEATURE = "klog.nodes-per-appliance"


class ApiVersionsRequest(Message, versions="0-3", flexible="3+"):
    client_software_name = Field(STRING, "3+")
    client_software_version = Field(STRING, "3+")


class ApiVersion(Struct):
    api_key = Field(INT16)
    min_version = Field(INT16)
    max_version = Field(INT16)


class SupportedFeatureKey(Struct):
    name = Field(STRING, "3+")
    min_version = Field(INT16, "3+")
    max_version = Field(INT16, "3+")


class FinalizedFeatureKey(Struct):
    name = Field(STRING, "3+")
    max_version_level = Field(INT16, "3+")
    min_version_level = Field(INT16, "3+")


class ApiVersionsResponse(Message, versions="0-3", flexible="3+"):
    error_code = Field(INT16)
    api_keys = Field(Array(ApiVersion))
    throttle_time_ms = Field(INT32, "1+")
    supported_features = Field(Array(SupportedFeatureKey), "3+", tag=0)
    finalized_features_epoch = Field(INT64, "3+", tag=1, default=-1)
    finalized_features = Field(Array(FinalizedFeatureKey), "3+", tag=2)
    zk_migration_ready = Field(BOOL, "3+", tag=3)


Request, Response = ApiVersionsRequest, ApiVersionsResponse
