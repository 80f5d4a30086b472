"""The partition side of transactions (KIP-98) on a `Partition` alone: the last stable offset
moves with a producer's transactions (begun by its first transactional batch, ended by a
marker), never the high watermark; markers' refusals (an older producer epoch, an older
coordinator epoch); the .txnindex written when an ABORT lands, read back for a fetch range,
rebuilt from the log when its file is deleted or the log is cut; a follower takes markers as
any batch; retention deletes a segment's .txnindex with it.
"""

from __future__ import annotations

import os

from appliance.control.topics import PartitionLeadership
from appliance.segments import PartitionLog, txn_index
from appliance.workers.replication.markers import read_marker
from appliance.workers.replication.partition import Partition
from klog.protocol.error_codes import ErrorCode
from klog.protocol.record_batch import read_header
from klog.protocol.records import build_batch
from tests.replication.test_partition import ME, PEER, TOPIC, run


def txn_batch(n=1, *, producer_id=7, sequence=0, epoch=0, transactional=True):
    return build_batch([(1_000, None, b"t%d" % i, ()) for i in range(n)],
                       producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                       is_transactional=transactional)


def plain(n=1):
    return build_batch([(1_000, None, b"p%d" % i, ()) for i in range(n)])


def txn_files(partition):
    return sorted(n for n in os.listdir(partition.log.directory) if n.endswith(".txnindex"))


def test_the_lso_waits_for_the_earliest_open_transaction_never_the_high_watermark(make):
    async def scenario():
        partition, _, _ = make()
        partition.append_as_leader(plain(2), now_ms=0)  # 0-1
        assert partition.last_stable_offset == partition.high_watermark == 2
        assert partition.append_as_leader(txn_batch(2, producer_id=7), now_ms=0).base_offset == 2
        partition.append_as_leader(plain(1), now_ms=0)  # 4
        partition.append_as_leader(txn_batch(1, producer_id=8), now_ms=0)  # 5
        assert partition.high_watermark == 6 and partition.last_stable_offset == 2
        commit = partition.write_marker(7, 0, True, 0, 0)  # marker at 6
        assert commit.error == ErrorCode.NONE and commit.base_offset == 6
        assert await commit.committed == ErrorCode.NONE  # acks=all: durable
        assert partition.last_stable_offset == 5  # producer 8's transaction is still open
        abort = partition.write_marker(8, 0, False, 0, 0)  # marker at 7
        assert partition.last_stable_offset == partition.high_watermark == 8
        assert abort.base_offset == 7
        assert partition.aborted_transactions(0, 8) == [txn_index.AbortedTxn(8, 5, 7, 8)]
        assert partition.aborted_transactions(6, 8) == [txn_index.AbortedTxn(8, 5, 7, 8)]
        assert partition.aborted_transactions(0, 5) == []  # it began at 5
        # a read_committed read stops at the LSO; read_uncommitted at the high watermark
        partition.append_as_leader(txn_batch(1, producer_id=7, sequence=2), now_ms=0)  # 8
        assert partition.last_stable_offset == 8 and partition.high_watermark == 9
        assert not partition.read(8, 1 << 20, committed=True)
        assert partition.read(8, 1 << 20).length > 0
        piece = partition.read(6, 1 << 20, committed=True)
        data = os.pread(piece.fd, piece.length, piece.position)
        header = read_header(data)
        assert header.is_control and read_marker(data) == (True, 0)
    run(scenario())


def test_markers_are_refused_as_kafka_refuses_them(make):
    async def scenario():
        partition, _, _ = make()
        partition.append_as_leader(txn_batch(1, producer_id=7, epoch=3), now_ms=0)
        old = partition.write_marker(7, 2, False, 0, 0)
        assert old.error == ErrorCode.INVALID_PRODUCER_EPOCH
        assert partition.write_marker(7, 3, False, 5, 0).error == ErrorCode.NONE
        partition.append_as_leader(txn_batch(1, producer_id=7, epoch=3, sequence=1), now_ms=0)
        fenced = partition.write_marker(7, 3, True, 4, 0)
        assert fenced.error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
        assert partition.last_stable_offset == 2  # still open
        # a non-transactional batch while its transaction is open; a client's control batch
        mixed = partition.append_as_leader(
            txn_batch(1, producer_id=7, epoch=3, sequence=2, transactional=False), now_ms=0)
        assert mixed.error == ErrorCode.INVALID_TXN_STATE
        forged = build_batch([(0, b"\0\0\0\0", b"\0\0\0\0\0\0", ())], producer_id=7,
                             producer_epoch=3, is_transactional=True, is_control=True)
        assert partition.append_as_leader(forged, now_ms=0).error == ErrorCode.INVALID_RECORD
        # a marker for a producer that has no open transaction is written all the same
        assert partition.write_marker(99, 0, True, 5, 0).error == ErrorCode.NONE
    run(scenario())


def test_the_txnindex_is_written_in_kafkas_format_and_rebuilt_by_recovery(make):
    async def scenario():
        partition, _, _ = make(name="p")
        partition.append_as_leader(txn_batch(2, producer_id=7), now_ms=0)  # 0-1
        partition.write_marker(7, 0, False, 1, 0)  # 2
        partition.append_as_leader(txn_batch(1, producer_id=8), now_ms=0)  # 3
        partition.write_marker(8, 0, False, 1, 0)  # 4
        name = f"{0:020d}.txnindex"
        path = os.path.join(partition.log.directory, name)
        raw = read_bytes(path)
        assert len(raw) == 2 * 34 and raw[:2] == b"\0\0"  # version 0, 34 bytes an entry
        expected = [txn_index.AbortedTxn(7, 0, 2, 3), txn_index.AbortedTxn(8, 3, 4, 5)]
        assert txn_index.read(partition.log.directory, 0) == expected
        partition.log.close()
        os.unlink(path)  # lost
        reopened = reopen(partition)
        assert txn_index.read(reopened.log.directory, 0) == expected
        assert reopened.aborted_transactions(0, 5) == expected
        with open(path, "ab") as file:
            file.write(b"\0\0garbage")  # torn by a crash
        reopened.log.close()
        reopened = reopen(reopened)
        assert read_bytes(path) == raw
        # the log cut below the second abort: its entry goes
        reopened.truncate_to(3, now_ms=0)
        assert txn_index.read(reopened.log.directory, 0) == expected[:1]
        assert reopened.last_stable_offset == 3
        reopened.truncate_to(2, now_ms=0)  # and below the first: the transaction is open again
        assert txn_files(reopened) == []
        assert reopened.last_stable_offset == 0 and reopened.high_watermark == 2
        reopened.log.close()
    run(scenario())


def reopen(partition) -> Partition:
    plog = PartitionLog.open(partition.log.directory, partition.log.config, now_ms=0)
    return Partition(TOPIC, 0, plog, partition._context, ask_isr=lambda p, isr: None)


def test_a_follower_takes_markers_and_indexes_aborts(make):
    async def scenario():
        leader, _, _ = make(name="leader")
        leader.append_as_leader(txn_batch(2, producer_id=7), now_ms=0)
        leader.write_marker(7, 0, False, 0, 0)
        leader.append_as_leader(txn_batch(1, producer_id=8), now_ms=0)
        follower, _, _ = make(name="follower")
        follower.become_follower(PartitionLeadership(PEER, 5, (ME, PEER), (ME, PEER)),
                                 start_high_watermark=0)
        seen = []
        follower.on_marker = lambda pid, commit, offset: seen.append((pid, commit, offset))
        piece = leader.log.read_replica(0, 1 << 20)
        records = os.pread(piece.fd, piece.length, piece.position)
        assert follower.append_as_follower(records, leader_high_watermark=4,
                                           leader_log_start_offset=0, now_ms=0)
        assert seen == [(7, False, 2)]
        assert follower.last_stable_offset == 3  # producer 8's transaction, open
        assert follower.aborted_transactions(0, 4) == [txn_index.AbortedTxn(7, 0, 2, 3)]
    run(scenario())


def test_retention_deletes_the_txnindex_with_its_segment(make):
    async def scenario():
        partition, _, _ = make()
        partition.append_as_leader(txn_batch(1, producer_id=7), now_ms=0)
        partition.write_marker(7, 0, False, 0, 0)
        partition.log.roll(now_ms=0)
        partition.append_as_leader(plain(1), now_ms=0)
        assert txn_files(partition) == [f"{0:020d}.txnindex"]
        partition.delete_records_before(2, now_ms=0)
        partition.log.segments.close_due(1 << 62)
        assert txn_files(partition) == []
    run(scenario())


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()
