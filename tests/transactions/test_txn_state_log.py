"""``__transaction_state``'s placement (Java's String.hashCode) and records (Kafka's
TransactionLogKey / TransactionLogValue)."""

from __future__ import annotations

import struct

from appliance.workers.transactions.state import TxnMetadata, TxnState
from appliance.workers.transactions.txn_log import (
    LoadedTransactions,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_string_hash,
    partition_for,
    record,
)


def test_java_string_hash():
    # values of java.lang.String.hashCode
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2**31  # Integer.MIN_VALUE
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112  # the known collision
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # two UTF-16 code units


def test_partition_is_kafkas_abs_of_the_hash():
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    negative = "polygenelubricantz"  # hashes to MIN_VALUE + 7
    assert java_string_hash(negative) == -2**31 + 7
    assert partition_for(negative, 50) == 7


META = TxnMetadata("tx-1", 4242, 7, 60_000, TxnState.ONGOING,
                   frozenset({("orders", 0), ("orders", 3), ("audit", 1)}), 1000, 2000)


def test_key_is_version_0_and_the_id():
    assert encode_key("tx-1") == b"\x00\x00\x00\x04tx-1"
    assert decode_key(encode_key("tx-ü")) == "tx-ü"


def test_value_version_0_layout():
    data = encode_value(META)
    version, pid, epoch, timeout, status, topics = struct.unpack_from(">hqhibi", data)
    assert (version, pid, epoch, timeout, status, topics) == (0, 4242, 7, 60_000, 1, 2)
    assert data.endswith(struct.pack(">qq", 2000, 1000))  # last update, then start
    assert decode_value("tx-1", data) == META


def test_value_version_1_flexible_is_read():
    # ProducerId, ProducerEpoch, TimeoutMs, Status, compact array of (compact string,
    # compact int32 array, tags), LastUpdate, Start, then tags (PreviousProducerId = 4000)
    body = (struct.pack(">hqhib", 1, 4242, 7, 60_000, 2) + bytes([2])
            + bytes([7]) + b"orders" + bytes([3]) + struct.pack(">ii", 0, 3) + bytes([0])
            + struct.pack(">qq", 2000, 1000) + bytes([1, 0, 8]) + struct.pack(">q", 4000))
    meta = decode_value("tx-1", body)
    assert meta.state is TxnState.PREPARE_COMMIT
    assert meta.partitions == {("orders", 0), ("orders", 3)}
    assert (meta.update_ms, meta.start_ms) == (2000, 1000)


def test_replay_keeps_the_latest_and_honours_tombstones():
    loaded = LoadedTransactions()
    loaded.apply(*record(META))
    later = META.to(TxnState.PREPARE_COMMIT, 3000)
    loaded.apply(*record(later))
    loaded.apply(*record(TxnMetadata("tx-2", 1, 0, 1000, TxnState.EMPTY)))
    loaded.apply(encode_key("tx-2"), None)
    loaded.apply(b"\x00\x05junk", b"zz")  # not ours: skipped
    assert loaded.ids == {"tx-1": later}
    assert loaded.skipped == 1
