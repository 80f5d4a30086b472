"""What a fleet test module runs on: one real three-server ZooKeeper ensemble (Debian's
zookeeper package) and, once for the module, the fleet its `FLEET` (a FleetSpec) describes,
with a ZooKeeper client in that fleet's chroot; or, for tests of klog's ZooKeeper code
without appliances, a klog `Session` in a fresh chroot of the ensemble."""

import itertools

import pytest

from cluster import znodes
from cluster.session import Session
from tests.fleet.harness import FleetSpec, running_fleet, zk_client
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


def _spec(request) -> FleetSpec:
    spec = getattr(request.module, "FLEET", None)
    if not isinstance(spec, FleetSpec):
        raise TypeError(f"{request.module.__name__} uses the fleet fixtures without a "
                        f"FLEET = FleetSpec(...)")
    return spec


@pytest.fixture(scope="module")
def fleet(ensemble, tmp_path_factory, request):
    """The module's appliances, started once for all its tests (a fleet is slow to start,
    and the tests of a module read as one story on it)."""
    spec = _spec(request)
    with running_fleet(ensemble, tmp_path_factory.mktemp(spec.chroot.strip("/")),
                       spec) as appliances:
        yield appliances


@pytest.fixture(scope="module")
def zk(ensemble, request):
    """A kazoo client in the module's fleet chroot, for reading its znodes."""
    client = zk_client(ensemble, _spec(request).chroot)
    yield client
    client.stop()


_chroots = itertools.count()


@pytest.fixture
def session(ensemble):
    """klog's own ZooKeeper session in a chroot of its own, with klog's persistent roots."""
    session = Session(f"{ensemble.connect}/session-{next(_chroots)}", session_timeout_ms=4000,
                      connection_timeout_ms=10_000)
    session.start()
    for root in znodes.PERSISTENT_ROOTS:
        session.call("ensure_path", root)
    yield session
    session.stop()
