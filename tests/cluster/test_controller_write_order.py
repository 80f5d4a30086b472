"""The controller writes the partition states that elect a new leader before those that only
shrink an ISR (issue 26): when an appliance dies, every partition it held a replica of needs a
write, but only those it led are unavailable until theirs lands. Pure: a recording writer."""

from cluster.controller import Election, reconcile
from tests.cluster.snapshots import snapshot, topic


class RecordingWriter:
    """FencedWriter's interface: records the paths `write_grouped` would set, in order."""

    def __init__(self):
        self.election = Election(epoch=2, epoch_version=1)
        self.paths: list[str] = []

    def write_grouped(self, builds, note=None):
        recorder = self

        class Tx:
            def set_data(self, path, data, version):
                recorder.paths.append(path)

        for build in builds:
            build(Tx())
        return [None] * len(builds)


def test_leader_elections_are_written_before_isr_shrinks():
    # appliance 1 (nodes 100, 101) is gone; partitions rotate their leaders over 1, 2, 3
    replicas = {p: tuple(((p + i) % 3 + 1) * 100 for i in range(3)) for p in range(30)}
    fleet = snapshot([topic("t", replicas)], appliances=(2, 3))
    writer = RecordingWriter()
    assert reconcile(writer, fleet) == 30  # every partition had node 100 in its ISR
    led_by_gone = {f"/brokers/topics/t/partitions/{p}/state" for p, r in replicas.items()
                   if r[0] == 100}
    assert len(led_by_gone) == 10
    assert set(writer.paths[:10]) == led_by_gone
    assert len(set(writer.paths)) == 30
