"""meta.properties: a disk of another cluster or node refuses to start, naming both ids."""

import pytest

from appliance.identity import (
    DiskIdentity,
    IdentityError,
    claim_log_dir,
    node_id_for,
    read_identity,
)
from tests.conftest import Appliance


def test_a_new_log_dir_is_stamped_and_then_recognised(tmp_path):
    mine = DiskIdentity("cluster-A", node_id_for(3, 1))
    claim_log_dir(tmp_path, mine)
    text = (tmp_path / "meta.properties").read_text()
    assert "broker.id=301\n" in text and "cluster.id=cluster-A\n" in text and "version=0" in text
    assert read_identity(tmp_path) == mine
    claim_log_dir(tmp_path, mine)  # the same owner: accepted


@pytest.mark.parametrize(("other", "named"), [
    (DiskIdentity("cluster-B", 301), ["cluster-A", "cluster-B"]),
    (DiskIdentity("cluster-A", 302), ["301", "302"]),
])
def test_a_log_dir_of_another_cluster_or_node_is_refused(tmp_path, other, named):
    claim_log_dir(tmp_path, DiskIdentity("cluster-A", 301))
    with pytest.raises(IdentityError) as raised:
        claim_log_dir(tmp_path, other)
    assert all(n in str(raised.value) for n in named)


def test_an_unreadable_meta_properties_is_an_error_naming_the_file(tmp_path):
    (tmp_path / "meta.properties").write_text("version=0\n")
    with pytest.raises(IdentityError, match="meta.properties"):
        read_identity(tmp_path)


def test_the_appliance_refuses_a_disk_of_another_cluster(tmp_path):
    appliance = Appliance(tmp_path / "a", log_dirs=2)
    appliance.start()
    appliance.stop()
    ours = read_identity(appliance.log_dirs[1])
    assert ours.node_id == 1
    (appliance.log_dirs[1] / "meta.properties").write_text(
        DiskIdentity("someone-elses-cluster", 1).to_properties())
    with pytest.raises(RuntimeError) as raised:
        appliance.start(timeout_s=10)
    message = str(raised.value)
    assert "exited with 1" in message
    assert "someone-elses-cluster" in message and ours.cluster_id in message
