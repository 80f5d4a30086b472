"""One fleet in network namespaces per test module (fleet.py), swept clean before it starts
(a run killed earlier leaves nothing behind for long) and removed after it, whatever happens;
each test starts on a whole fleet (`restore`) and leaves it whole."""

import os

import pytest

from tests.faults import network
from tests.faults.fleet import FaultFleet
from tests.fleet import zookeeper


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    reason = network.unavailable_reason() or zookeeper.unavailable_reason()
    if reason:
        if os.environ.get("CI") and os.geteuid() == 0:
            pytest.fail(f"the fault tests cannot run: {reason}")
        pytest.skip(reason)
    network.sweep()
    built = FaultFleet(tmp_path_factory.mktemp("faults"))
    try:
        built.start()
        yield built
    finally:
        built.close()


@pytest.fixture
def whole(fleet):
    fleet.restore()
    yield fleet
    fleet.restore()
