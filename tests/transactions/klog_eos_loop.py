"""klog's own consume-transform-produce loop, run as a process by test_klog_client_txn: read
``INPUT`` with a read_committed group consumer, write each record upper-cased to the same
partition of ``OUTPUT``, and commit the consumed offsets in the same transaction. With
``--die-at N:PHASE`` it kills itself with SIGKILL in its N-th transaction, at PHASE
("sent": records sent, offsets not; "offsets": offsets sent, not committed; "committed":
just after the commit). It exits 0 once every input partition is consumed to ``--ends``.

    python -m tests.transactions.klog_eos_loop BOOTSTRAP INPUT OUTPUT --ends 0:120,1:80
"""

from __future__ import annotations

import argparse
import os
import signal
import time

import klog
from klog import TopicPartition


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--ends", required=True)
    parser.add_argument("--die-at", default="")
    args = parser.parse_args()
    ends = {TopicPartition(args.input, int(p)): int(e)
            for p, e in (part.split(":") for part in args.ends.split(","))}
    die_at, phase = (int(args.die_at.split(":")[0]), args.die_at.split(":")[1]) \
        if args.die_at else (-1, "")
    producer = klog.Producer(bootstrap_servers=args.bootstrap, transactional_id="eos-loop",
                             linger_ms=0)
    producer.init_transactions(30)  # before reading offsets: the previous one is ended first
    consumer = klog.Consumer(bootstrap_servers=args.bootstrap, group_id="eos-loop",
                             group_instance_id="eos-loop-1", enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest",
                             max_poll_records=25)
    consumer.subscribe([args.input])
    deadline = time.monotonic() + 60
    transactions = 0
    while True:
        records = consumer.poll(timeout_ms=200)
        if not records:
            assigned = consumer.assignment()
            if assigned == set(ends) and all(consumer.position(tp) >= ends[tp]
                                             for tp in assigned):
                break
            if time.monotonic() > deadline:
                return 3
            continue
        transactions += 1
        producer.begin_transaction()
        for tp, batch in records.items():
            for r in batch:
                producer.send(args.output, r.value.upper(), key=b"%d:%d" % (r.partition,
                                                                               r.offset),
                              partition=tp.partition)
        if transactions == die_at and phase == "sent":
            producer.flush(10)
            os.kill(os.getpid(), signal.SIGKILL)
        producer.send_offsets_to_transaction(
            {tp: batch[-1].offset + 1 for tp, batch in records.items()},
            consumer.group_metadata(), 30)
        if transactions == die_at and phase == "offsets":
            os.kill(os.getpid(), signal.SIGKILL)
        producer.commit_transaction(30)
        if transactions == die_at and phase == "committed":
            os.kill(os.getpid(), signal.SIGKILL)
    consumer.close()
    producer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
