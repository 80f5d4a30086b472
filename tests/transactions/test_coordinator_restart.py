"""A new coordinator reloads ``__transaction_state``: after a kill -9 of the appliance, the
ids keep their producer ids and epochs, an open transaction stays open, and one left in
PrepareCommit is completed (its markers sent again)."""

from __future__ import annotations

import time

from klog.protocol.error_codes import ErrorCode
from tests.conftest import Appliance, topic_maker
from tests.transactions.coordinator_helpers import (
    SETTINGS,
    add_partitions,
    coordinator,
    describe,
    end,
    init,
    wait_for_state,
)


def test_kill_9_then_the_reloaded_coordinator_keeps_ids_and_open_transactions(tmp_path):
    appliance = Appliance(tmp_path / "appliance", log_dirs=2, settings=SETTINGS).start()
    try:
        topic = topic_maker(appliance.bootstrap, partitions=2, prefix="restart")()
        client = coordinator(appliance, "tx-prepared")
        pid = init(client, "tx-prepared")
        assert add_partitions(client, "tx-prepared", pid.producer_id, 0, {topic: [0, 1]}) == \
            {(topic, 0): ErrorCode.NONE, (topic, 1): ErrorCode.NONE}
        client.close()
        open_client = coordinator(appliance, "tx-open")
        opened = init(open_client, "tx-open")
        add_partitions(open_client, "tx-open", opened.producer_id, 0, {topic: [1]})
        open_client.close()
        appliance.kill()
        appliance.start()
        started = time.monotonic()
        client = coordinator(appliance, "tx-prepared")
        state = describe(client, "tx-prepared")
        assert (state.producer_id, state.producer_epoch) == (pid.producer_id, 0)
        assert state.transaction_state == "Ongoing"  # no EndTxn was sent before the kill
        assert [(t.topic, sorted(t.partitions)) for t in state.topics] == [(topic, [0, 1])]
        client.close()
        open_client = coordinator(appliance, "tx-open")
        state = describe(open_client, "tx-open")
        assert (state.transaction_state, state.producer_id) == ("Ongoing", opened.producer_id)
        open_client.close()
        print(f"reloaded and described {time.monotonic() - started:.2f} s after the restart")
    finally:
        appliance.stop()


def test_kill_9_between_end_txn_and_the_markers(tmp_path):
    """EndTxn answered, kill -9 before CompleteCommit could be written: the new coordinator
    sends the markers again and completes the transaction."""
    appliance = Appliance(tmp_path / "appliance", log_dirs=2, settings=SETTINGS).start()
    try:
        topic = topic_maker(appliance.bootstrap, partitions=2, prefix="restart")()
        client = coordinator(appliance, "tx-end")
        pid = init(client, "tx-end")
        add_partitions(client, "tx-end", pid.producer_id, 0, {topic: [0, 1]})
        assert end(client, "tx-end", pid.producer_id, 0, True) == ErrorCode.NONE
        appliance.kill()
        appliance.start()
        client = coordinator(appliance, "tx-end")
        assert wait_for_state(client, "tx-end", "CompleteCommit").transaction_state == \
            "CompleteCommit"
        client.close()
    finally:
        appliance.stop()


def test_snapshots_compact_the_log_and_a_reload_keeps_every_id(tmp_path):
    from pathlib import Path

    from appliance.segments.layout import log_start_on_disk

    appliance = Appliance(tmp_path / "appliance", log_dirs=1, settings={
        **SETTINGS, "transaction.state.log.num.partitions": "1",
        "transaction.state.log.segment.bytes": str(64 * 1024)}).start()
    try:
        client = coordinator(appliance, "tx-many-0")
        epochs = {}
        for _ in range(40):
            for i in range(20):
                answer = init(client, f"tx-many-{i}")
                assert answer.error_code == 0
                epochs[f"tx-many-{i}"] = (answer.producer_id, answer.producer_epoch)
        assert epochs["tx-many-0"][1] == 39
        directory = Path(appliance.log_dirs[0]) / "__transaction_state-0"
        deadline = time.monotonic() + 10
        while log_start_on_disk(str(directory)) == 0:
            assert time.monotonic() < deadline, "no snapshot moved the log start"
            time.sleep(0.1)
        client.close()
        appliance.kill()
        appliance.start()
        client = coordinator(appliance, "tx-many-0")
        for transactional_id, (producer_id, epoch) in epochs.items():
            state = describe(client, transactional_id)
            assert (state.producer_id, state.producer_epoch) == (producer_id, epoch)
        client.close()
    finally:
        appliance.stop()
