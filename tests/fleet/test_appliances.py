"""Three real appliances (two workers each) forming one cluster through a real three-server
ZooKeeper ensemble, used by real Kafka clients: every node answers for the whole fleet,
topics spread over the appliances, keyed messages keep their order."""

import collections
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import Appliance, require_binary
from tests.fleet.harness import (
    SESSION_MS,
    FleetSpec,
    controller_and_epoch,
    led,
    metadata,
    read_values,
)
from tests.polling import wait_until

pytestmark = pytest.mark.interop

FLEET = FleetSpec("/klog-fleet")


def node_addresses(appliances):
    return [f"127.0.0.1:{a.port + i}" for a in appliances for i in range(2)]


def test_every_node_lists_the_same_fleet(fleet):
    """Every node converges on one view: a node's supervisor hears of the last node to
    register a moment after the fleet starts (kcat may also ask any node it learned of)."""
    import orjson
    kcat = require_binary("kcat")

    def views():
        found = set()
        for address in node_addresses(fleet):
            out = subprocess.run([kcat, "-L", "-b", address, "-J"], capture_output=True,
                                 text=True, timeout=30, check=True).stdout
            raw = orjson.loads(out)
            found.add((tuple(sorted(b["id"] for b in raw["brokers"])),
                       tuple(sorted((t["topic"], len(t["partitions"])) for t in raw["topics"]))))
        return found

    everyone = (100, 101, 200, 201, 300, 301)
    wait_until(lambda: len(seen := views()) == 1 and next(iter(seen))[0] == everyone, 30,
               f"every node to list the same fleet, nodes {everyone}")


def test_cluster_status_shows_the_three_appliances(fleet):
    import orjson

    from tests.conftest import REPO
    done = subprocess.run([sys.executable, "-m", "klog_cli.main", "cluster", "status", "--config",
                           str(fleet[0].config), "--json"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    status = orjson.loads(done.stdout)
    assert sorted(status["appliances"]) == ["1", "2", "3"]
    assert all(len(a["nodes"]) == 2 for a in status["appliances"].values())
    assert status["controller"] in (1, 2, 3) and status["controller_epoch"] >= 1
    assert status["offline_partitions"] == []
    human = subprocess.run([sys.executable, "-m", "klog_cli.main", "cluster", "status", "--config",
                            str(fleet[0].config)], cwd=REPO, capture_output=True, text=True,
                           timeout=60)
    assert human.returncode == 0 and "controller: appliance" in human.stdout


def test_a_topic_created_through_any_node_spreads_and_keeps_key_order(fleet):
    admin = AdminClient({"bootstrap.servers": fleet[1].bootstrap})
    admin.create_topics([NewTopic("fleet-keys", 12, 1)])["fleet-keys"].result(30)
    deadline = time.monotonic() + 30
    while True:
        topic = metadata(fleet[2].bootstrap).topics.get("fleet-keys")
        if topic is not None and len(topic.partitions) == 12 and all(
                p.leader >= 0 for p in topic.partitions.values()):
            break
        assert time.monotonic() < deadline, "partitions never got leaders"
        time.sleep(0.2)
    assert {p.leader // 100 for p in topic.partitions.values()} == {1, 2, 3}
    producer = Producer({"bootstrap.servers": fleet[0].bootstrap, "linger.ms": 5,
                         "enable.idempotence": True})
    count = 100_000
    acked = []
    for i in range(count):
        key = f"user-{i % 500}".encode()
        producer.produce("fleet-keys", f"{i}".encode(), key,
                         on_delivery=lambda err, msg: acked.append(err is None))
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert len(acked) == count and all(acked)
    consumer = Consumer({"bootstrap.servers": fleet[2].bootstrap, "group.id": "fleet-order",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["fleet-keys"])
    by_key = collections.defaultdict(list)
    seen = 0
    deadline = time.monotonic() + 120
    while seen < count and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=1):
            if message.error():
                continue
            by_key[message.key()].append(int(message.value()))
            seen += 1
    consumer.close()
    assert seen == count
    for values in by_key.values():
        assert values == sorted(values)  # per-key order kept


def test_partitions_added_and_configs_read_through_any_node(fleet):
    from confluent_kafka.admin import ConfigResource, NewPartitions
    creator = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    creator.create_topics([NewTopic("fleet-grow", 3, 1, config={"retention.ms": "7200000"})]
                          )["fleet-grow"].result(30)
    grower = AdminClient({"bootstrap.servers": f"127.0.0.1:{fleet[1].port + 1}"})
    grower.create_partitions([NewPartitions("fleet-grow", 9)])["fleet-grow"].result(30)
    wait_until(lambda: all(led(a.bootstrap, "fleet-grow", 9) for a in fleet), 30,
               "all nine partitions led, as seen from every appliance")
    topic = metadata(fleet[2].bootstrap).topics["fleet-grow"]
    assert {p.leader // 100 for p in topic.partitions.values()} == {1, 2, 3}
    with pytest.raises(Exception, match="INVALID_PARTITIONS"):
        grower.create_partitions([NewPartitions("fleet-grow", 4)])["fleet-grow"].result(30)
    for appliance in fleet:  # DescribeConfigs answers for the fleet's topics on every node
        reader = AdminClient({"bootstrap.servers": appliance.bootstrap})
        (future,) = reader.describe_configs([ConfigResource("topic", "fleet-grow")]).values()
        assert future.result(30)["retention.ms"].value == "7200000"
    producer = Producer({"bootstrap.servers": fleet[2].bootstrap, "enable.idempotence": True})
    for i in range(90):
        producer.produce("fleet-grow", f"{i}".encode(), partition=i % 9)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": fleet[0].bootstrap, "group.id": "fleet-grow",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["fleet-grow"])
    assert read_values(consumer, 90, 60) == set(range(90))












def test_a_stopped_appliance_leaves_and_returns_with_its_data(fleet):
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic("fleet-return", 6, 1)])["fleet-return"].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, "fleet-return", 6), 30, "leaders of fleet-return")
    producer = Producer({"bootstrap.servers": fleet[0].bootstrap, "enable.idempotence": True})
    for i in range(600):
        producer.produce("fleet-return", f"{i}".encode(), partition=i % 6)
    assert producer.flush(30) == 0
    leaving = fleet[2]
    try:
        assert leaving.stop() == 0  # SIGTERM: graceful
        wait_until(lambda: {b for b in metadata(fleet[0].bootstrap).brokers} ==
                   {100, 101, 200, 201}, SESSION_MS / 1000 + 5, "the stopped nodes to leave")
        offline = [p for p in metadata(fleet[0].bootstrap).topics["fleet-return"]
                   .partitions.values() if p.leader < 0]
        assert offline and all(p.replicas[0] // 100 == 3 for p in offline)
    finally:  # the module's later tests need the whole fleet, whatever happened here
        leaving.stop(signal.SIGKILL)
        leaving.start(timeout_s=60)
    wait_until(lambda: len(metadata(fleet[0].bootstrap).brokers) == 6, 30, "the nodes to return")
    wait_until(lambda: led(fleet[0].bootstrap, "fleet-return", 6), 30,
               "every partition to have a leader again")
    consumer = Consumer({"bootstrap.servers": fleet[1].bootstrap, "group.id": "fleet-return",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["fleet-return"])
    assert read_values(consumer, 600, 60) == set(range(600))


def test_four_clients_in_one_group_across_the_fleet_survive_an_appliance_stop(fleet,
                                                                              tmp_path):
    from tests.groups.members import MemberProcess, overlaps
    from tests.groups.test_group_interop import Producer as SteadyProducer
    from tests.groups.test_group_interop import committed_and_end
    topic, group, partitions = "fleet-mixed", "fleet-mixed", 12
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, topic, partitions), 30, "leaders")
    producer = SteadyProducer(fleet[0].bootstrap, topic, rate_per_s=400)
    producer.start()
    members = [MemberProcess(client, fleet[i % 2].bootstrap, group, topic,
                             tmp_path / f"{i}-{client}.log", session_ms=6000)
               for i, client in enumerate(["confluent", "kafka-python", "aiokafka", "klog"])]
    try:
        wait_until(lambda: set().union(*(m.owned() for m in members)) == set(range(partitions))
                   and all(m.owned() for m in members), 60, "the group to share the topic")
        assert fleet[2].stop() == 0  # SIGTERM
        wait_until(lambda: set(metadata(fleet[0].bootstrap).brokers).isdisjoint({300, 301}),
                   SESSION_MS / 1000 + 5, "the stopped appliance's nodes to leave Metadata")
        time.sleep(2)
        fleet[2].start(timeout_s=60)
        wait_until(lambda: len(metadata(fleet[0].bootstrap).brokers) == 6, 30, "its return")
        time.sleep(2)
        producer.stop()
        assert len(producer.acked) > 500

        def caught_up():  # at least once: this producer is not idempotent, and a request
            # in flight when its appliance stopped may be appended without an answer
            committed, ends = committed_and_end(fleet[0].bootstrap, group, topic, partitions)
            return committed == ends and sum(ends.values()) >= len(producer.acked)
        try:
            wait_until(caught_up, 90, "committed offsets to reach the log end")
        except AssertionError:
            committed, ends = committed_and_end(fleet[0].bootstrap, group, topic, partitions)
            raise AssertionError(f"committed {committed}\nends {ends}\nacked "
                                 f"{len(producer.acked)}\n" + "\n".join(
                                     f"{m.client}: {sorted(m.owned())} {m.stderr_text()[-300:]}"
                                     for m in members)) from None
    finally:
        producer.stopping.set()
        codes = [m.stop() for m in members]
    assert codes == [0, 0, 0, 0], [m.stderr_text()[-500:] for m in members]
    consumed = set().union(*(m.consumed() for m in members))
    assert producer.acked <= consumed, f"{len(producer.acked - consumed)} never consumed"
    assert not overlaps(members), overlaps(members)[:5]


def test_controller_failover_after_kill_9_of_its_supervisor(fleet, zk):
    controller, epoch = wait_until(lambda: (c := controller_and_epoch(zk))[0] > 0 and c,
                                   20, "a controller")
    victim = fleet[controller - 1]
    killed_at = time.monotonic()
    victim.kill()
    new, new_epoch = wait_until(
        lambda: (c := controller_and_epoch(zk))[0] > 0 and c[0] != controller and c,
        SESSION_MS / 1000 + 10, "another controller")
    took_s = time.monotonic() - killed_at
    assert new_epoch > epoch
    print(f"controller failover: {took_s:.1f} s (session timeout {SESSION_MS / 1000} s)")
    survivor = fleet[new - 1]
    admin = AdminClient({"bootstrap.servers": survivor.bootstrap})
    admin.create_topics([NewTopic("after-failover", 4, 1)])["after-failover"].result(30)
    wait_until(lambda: led(survivor.bootstrap, "after-failover", 4), 30,
               "leaders of a topic created after the failover")
    # the killed supervisor's workers notice its end, stop, and let go of their ports
    wait_until(lambda: not any(Appliance._accepts(victim.port + i) for i in range(2)),
               30, "the orphaned workers to stop")
    victim.start(timeout_s=60)
    wait_until(lambda: len(metadata(survivor.bootstrap).brokers) == 6, 30,
               "the restarted appliance's nodes")


def test_a_paused_controller_cannot_write_and_reregisters_after_its_session_expired(
        fleet, zk):
    import os
    import signal
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic("before-pause", 6, 1)])["before-pause"].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, "before-pause", 6), 30, "leaders")
    controller, epoch = wait_until(lambda: (c := controller_and_epoch(zk))[0] > 0 and c,
                                   30, "a controller")
    assert any(state["controller_epoch"] == epoch for _, state, _ in partition_states(zk))
    paused = fleet[controller - 1]
    others = [a for a in fleet if a is not paused]
    own_nodes = {controller * 100, controller * 100 + 1}
    os.kill(paused.process.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: set(metadata(others[0].bootstrap).brokers).isdisjoint(own_nodes),
                   SESSION_MS / 1000 + 10, "the paused appliance's nodes to expire")
        new, new_epoch = wait_until(
            lambda: (c := controller_and_epoch(zk))[0] not in (-1, controller) and c,
            20, "another controller")
    finally:
        resumed_ms = time.time() * 1000
        os.kill(paused.process.pid, signal.SIGCONT)
    assert new_epoch > epoch
    wait_until(lambda: len(metadata(others[0].bootstrap).brokers) == 6, 30,
               "re-registration on a new session, without a restart")
    assert paused.process.poll() is None
    time.sleep(2)  # the resumed supervisor has run its passes with its stale election
    assert controller_and_epoch(zk) == (new, new_epoch)
    stale = [path for path, state, mtime in partition_states(zk)
             if state["controller_epoch"] == epoch and mtime > resumed_ms]
    assert not stale, f"written by the deposed controller after it resumed: {stale}"


def partition_states(zk):
    """(path, state, mtime in ms) of every partition state znode of the fleet."""
    import orjson
    out = []
    for topic in zk.get_children("/brokers/topics"):
        for partition in zk.get_children(f"/brokers/topics/{topic}/partitions"):
            path = f"/brokers/topics/{topic}/partitions/{partition}/state"
            data, stat = zk.get(path)
            out.append((path, orjson.loads(data), stat.mtime))
    return out


def test_a_log_dir_of_another_cluster_refuses_to_start(fleet, tmp_path):
    from appliance.identity import DiskIdentity
    stranger = Appliance(tmp_path / "stranger", log_dirs=1, settings={
        "broker.id": "9", "zookeeper.connect": fleet[0].config.read_text().split(
            "zookeeper.connect=")[1].split("\n")[0]})
    stranger.log_dirs[0].mkdir(parents=True)
    (stranger.log_dirs[0] / "meta.properties").write_text(
        DiskIdentity("another-cluster", 900).to_properties())
    fleet_id = metadata(fleet[0].bootstrap).cluster_id
    with pytest.raises(RuntimeError) as raised:
        stranger.start(timeout_s=30)
    message = str(raised.value)
    assert "exited with 1" in message
    assert "another-cluster" in message and fleet_id in message  # both ids named


def test_produce_and_fetch_go_on_without_a_zookeeper_quorum(fleet, ensemble):
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic("through-outage", 3, 1)])["through-outage"].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, "through-outage", 3), 30, "leaders")
    ensemble.stop(0)  # one of three: nothing changes
    admin.create_topics([NewTopic("one-server-down", 2, 1)])["one-server-down"].result(30)
    wait_until(lambda: led(fleet[2].bootstrap, "one-server-down", 2), 30,
               "leaders while one ZooKeeper server is down")
    ensemble.stop(1)  # two of three: no quorum
    try:
        producer = Producer({"bootstrap.servers": fleet[0].bootstrap,
                             "enable.idempotence": True})
        for i in range(300):
            producer.produce("through-outage", f"{i}".encode(), partition=i % 3)
        assert producer.flush(30) == 0
        refused = admin.create_topics([NewTopic("during-outage", 1, 1)],
                                      request_timeout=40)["during-outage"]
        with pytest.raises(Exception) as raised:
            refused.result(60)
        assert "ZooKeeper" in str(raised.value)
        consumer = Consumer({"bootstrap.servers": fleet[1].bootstrap,
                             "group.id": "through-outage-reader", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        from confluent_kafka import TopicPartition
        consumer.assign([TopicPartition("through-outage", p, 0) for p in range(3)])
        assert read_values(consumer, 300, 30) == set(range(300))
    finally:
        ensemble.start(0)
        ensemble.start(1)
    wait_until(lambda: admin.create_topics([NewTopic("after-outage", 1, 1)])["after-outage"]
               .exception(30) is None, 60, "topic creation once the quorum is back")
