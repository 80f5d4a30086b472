"""One real three-server ZooKeeper ensemble per test module (Debian's zookeeper package)."""

import pytest

from tests.fleet.zookeeper import Ensemble, unavailable_reason


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory):
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    zk = Ensemble(tmp_path_factory.mktemp("zk"))
    try:
        zk.start()
        yield zk
    finally:
        zk.close()
