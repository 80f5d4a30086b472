"""``transactional.id.expiration.ms``: an idle id is removed (a tombstone in
``__transaction_state``), and stays removed after a kill -9; an open transaction keeps its id."""

from __future__ import annotations

import time

from klog.protocol.error_codes import ErrorCode
from tests.conftest import Appliance
from tests.transactions.coordinator_helpers import (
    SETTINGS,
    add_partitions,
    coordinator,
    describe,
    init,
)


def test_idle_ids_expire_and_stay_expired(tmp_path):
    appliance = Appliance(tmp_path / "appliance", log_dirs=1, settings={
        **SETTINGS, "transactional.id.expiration.ms": "1500",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "200",
        "num.partitions": "1"}).start()
    try:
        client = coordinator(appliance, "tx-idle")
        idle = init(client, "tx-idle")
        busy = init(client, "tx-busy", timeout_ms=600_000)
        import klog
        with klog.Admin(appliance.bootstrap) as admin:
            admin.create_topic("expiry", 1)
        assert add_partitions(client, "tx-busy", busy.producer_id, 0, {"expiry": [0]}) == \
            {("expiry", 0): ErrorCode.NONE}
        assert idle.error_code == 0
        deadline = time.monotonic() + 15
        while describe(client, "tx-idle").error_code == 0:
            assert time.monotonic() < deadline, "tx-idle did not expire"
            time.sleep(0.2)
        assert describe(client, "tx-idle").error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert describe(client, "tx-busy").transaction_state == "Ongoing"
        client.close()
        appliance.kill()
        appliance.start()
        client = coordinator(appliance, "tx-idle")
        assert describe(client, "tx-idle").error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert describe(client, "tx-busy").transaction_state == "Ongoing"
        again = init(client, "tx-idle")  # a new producer id for an expired id
        assert again.error_code == 0 and again.producer_epoch == 0
        client.close()
    finally:
        appliance.stop()
