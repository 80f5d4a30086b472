"""Reads spread over the workers of an appliance: any worker serves any partition's Fetch."""

from __future__ import annotations

from appliance.config import load_config
from appliance.shm.appliance_region import ApplianceRegion
from klog import Consumer, Producer, TopicPartition
from klog.metadata import ClusterMetadata, note_appliance_broker, read_replica_for
from klog.protocol.apis import api_versions, metadata
from tests.interop.helpers import create_topic


def cluster_with(racks: dict[int, str | None], leader: int, host: str = "h") -> ClusterMetadata:
    cluster = ClusterMetadata()
    cluster.update(metadata.Response(
        brokers=[metadata.MetadataResponseBroker(node_id=n, host=host, port=n, rack=r)
                 for n, r in racks.items()],
        topics=[metadata.MetadataResponseTopic(name="t", partitions=[
            metadata.MetadataResponsePartition(partition_index=p, leader_id=leader)
            for p in range(32)])]), now_ms=0)
    return cluster


def test_reads_go_to_the_leader_unless_it_is_an_appliance_worker():
    plain = cluster_with({0: None, 1: None}, leader=1, host="kafka")
    assert {read_replica_for(plain, "t", p) for p in range(32)} == {1}
    # a Kafka broker's ApiVersions answer carries no klog feature: read from the leader
    note_appliance_broker("kafka:0", api_versions.Response(api_keys=[]))
    same_rack = cluster_with({0: "rack-a", 1: "rack-a"}, leader=1, host="kafka")
    assert {read_replica_for(same_rack, "t", p) for p in range(32)} == {1}
    # a klog worker announces node ids of 100 per appliance; racks play no part
    note_appliance_broker("klog:0", api_versions.Response(api_keys=[], supported_features=[
        api_versions.SupportedFeatureKey(name=api_versions.APPLIANCE_FEATURE, min_version=100,
                                         max_version=100)]))
    appliance = cluster_with({0: "rack-a", 1: None, 100: "rack-a"}, leader=1, host="klog")
    chosen = {read_replica_for(appliance, "t", p) for p in range(32)}
    assert chosen == {0, 1}, "reads spread over the leader's appliance, not to another one"


def test_a_consumer_reads_through_workers_that_do_not_own_the_partitions(appliance_factory):
    appliance = appliance_factory(log_dirs=2)
    create_topic(appliance.bootstrap, "spread-reads", 16)
    with Producer(bootstrap_servers=appliance.bootstrap) as producer:
        for i in range(1600):
            producer.send("spread-reads", f"v{i}".encode(), partition=i % 16)
        producer.flush()
    consumer = Consumer(bootstrap_servers=appliance.bootstrap)
    consumer.assign([TopicPartition("spread-reads", p) for p in range(16)])
    consumer.seek_to_beginning()
    got = []
    while len(got) < 1600:
        for records in consumer.poll(timeout_ms=2000).values():
            got.extend(r.value for r in records)
    consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(1600))

    region = ApplianceRegion.open_status(load_config(appliance.config))
    try:
        served_by_other = 0
        for p in range(16):
            slot = region.partitions.find("spread-reads", p)
            view = region.partitions.read_partition(slot)
            counts = region.fetch_out.partition_out(slot, view.epoch)
            served_by_other += sum(c[0] for w, c in enumerate(counts) if w != view.owner and c)
    finally:
        region.close()
    assert served_by_other > 0, "no partition was read through a worker that does not own it"


def test_a_broker_before_api_versions_v3_is_asked_again_at_a_version_it_serves():
    from klog.outgoing import api_versions_retry
    older = api_versions.Response(error_code=35, api_keys=[
        api_versions.ApiVersion(api_key=18, min_version=0, max_version=2)])
    assert api_versions_retry(older) == 2
    assert api_versions_retry(api_versions.Response(error_code=0, api_keys=[])) is None
