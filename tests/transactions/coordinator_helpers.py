"""Helpers of the transaction coordinator's tests: an appliance with a small
``__transaction_state``, and raw requests to the coordinator of a transactional id."""

from __future__ import annotations

import time

from klog.protocol.apis import (
    add_partitions_to_txn,
    describe_transactions,
    end_txn,
    find_coordinator,
    init_producer_id,
    list_transactions,
)
from klog.protocol.error_codes import ErrorCode
from tests.worker.raw import RawClient

SETTINGS = {
    "transaction.state.log.num.partitions": "4",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "auto.create.topics.enable": "true",
}


def coordinator(appliance, transactional_id: str, timeout_s: float = 20) -> RawClient:
    """A raw connection to the node FindCoordinator (key type 1) names for the id."""
    deadline = time.monotonic() + timeout_s
    with_bootstrap = RawClient(appliance.port)
    try:
        while True:
            answer = with_bootstrap.call(find_coordinator, 2, key=transactional_id, key_type=1)
            if answer.error_code == 0:
                return RawClient(answer.port)
            assert time.monotonic() < deadline, ErrorCode(answer.error_code)
            time.sleep(0.1)
    finally:
        with_bootstrap.close()


def init(client: RawClient, transactional_id: str, *, version: int = 4, timeout_ms=60_000,
         producer_id=-1, producer_epoch=-1, retry_s: float = 0):
    """InitProducerId; CONCURRENT_TRANSACTIONS retried for ``retry_s``."""
    deadline = time.monotonic() + retry_s
    while True:
        fields = {"transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms}
        if version >= 3:
            fields.update(producer_id=producer_id, producer_epoch=producer_epoch)
        answer = client.call(init_producer_id, version, **fields)
        if answer.error_code != ErrorCode.CONCURRENT_TRANSACTIONS or \
                time.monotonic() >= deadline:
            return answer
        time.sleep(0.1)


def add_partitions(client: RawClient, transactional_id: str, producer_id: int, epoch: int,
                   partitions: dict[str, list[int]], version: int = 3) -> dict:
    answer = client.call(
        add_partitions_to_txn, version, v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[add_partitions_to_txn.AddPartitionsToTxnTopic(name=t, partitions=p)
                             for t, p in partitions.items()])
    return {(t.name, r.partition_index): ErrorCode(r.partition_error_code)
            for t in answer.results_by_topic_v3_and_below for r in t.results_by_partition}


def end(client: RawClient, transactional_id: str, producer_id: int, epoch: int, commit: bool,
        version: int = 3) -> ErrorCode:
    answer = client.call(end_txn, version, transactional_id=transactional_id,
                         producer_id=producer_id, producer_epoch=epoch, committed=commit)
    return ErrorCode(answer.error_code)


def describe(client: RawClient, transactional_id: str):
    answer = client.call(describe_transactions, 0, transactional_ids=[transactional_id])
    (state,) = answer.transaction_states
    return state


def listed(client: RawClient, states=(), producer_ids=()) -> dict[str, str]:
    answer = client.call(list_transactions, 1, state_filters=list(states),
                         producer_id_filters=list(producer_ids), duration_filter=-1)
    return {s.transactional_id: s.transaction_state for s in answer.transaction_states}


def wait_for_state(client: RawClient, transactional_id: str, wanted: str,
                   timeout_s: float = 15):
    deadline = time.monotonic() + timeout_s
    while True:
        state = describe(client, transactional_id)
        if state.transaction_state == wanted or time.monotonic() > deadline:
            return state
        time.sleep(0.1)
