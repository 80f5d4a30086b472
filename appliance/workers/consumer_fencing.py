"""Whether a consumer's Fetch or ListOffsets may be answered here, in cluster mode (KIP-320).

A pure decision over what every worker of the appliance knows alike: the controller's
partition state as the supervisor broadcast it (`TopicInfo.leadership`). Any worker serves a
Fetch for any partition of its appliance (through shm), so the answer must not depend on
which worker owns the replica, only on the broadcast each worker holds.

- **current_leader_epoch** (Kafka's order: checked before anything else): older than the
  partition's leader epoch is FENCED_LEADER_EPOCH (the client missed an election: it must
  refresh metadata, and must not read a log that may have diverged from the new leader's);
  newer is UNKNOWN_LEADER_EPOCH (this worker has not heard of the election yet: the client
  retries); -1 asks for no check (older clients).
- **leadership**: the replica of this appliance must lead. A follower answers
  NOT_LEADER_OR_FOLLOWER to a consumer, as Kafka does without KIP-392 follower reads. Why not
  serve from the follower, as a Kafka 2.4+ follower would for Fetch v11: no client here asks
  a follower unless the leader named it (`preferred_read_replica`, which klog never sends),
  so a consumer reaching a follower is one with stale metadata. The follower's high
  watermark lags the leader's (it learns it on its next fetch) and, right after a restart, its
  log may end below the consumer's position: it would answer empty fetches, or worse
  OFFSET_OUT_OF_RANGE, which makes kafka-python and aiokafka reset. NOT_LEADER_OR_FOLLOWER
  sends every client to the leader at once.

A topic without `leadership` (an appliance that runs alone) is never refused here.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.control.topics import TopicInfo
from klog.protocol.error_codes import ErrorCode

NO_EPOCH = -1


def epoch_refusal(current_leader_epoch: int, leader_epoch: int) -> ErrorCode | None:
    """KIP-320's check of a request's `current_leader_epoch` against ours; None: it passes."""
    if current_leader_epoch == NO_EPOCH or leader_epoch < 0:
        return None
    if current_leader_epoch < leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if current_leader_epoch > leader_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return None


def consumer_refusal(info: TopicInfo | None, index: int, current_leader_epoch: int,
                     node_id_of: Callable[[int], int]) -> ErrorCode | None:
    """Why a consumer's read of partition `index` is refused on this appliance, or None.
    `node_id_of` gives the node id of a worker of this appliance: the replica here leads when
    the controller's leader is the node of the worker that owns it. Unknown topics and
    partitions pass: the caller answers those as it always did."""
    if info is None or info.leadership is None or not info.has_partition(index):
        return None
    state = info.leadership[index]
    refused = epoch_refusal(current_leader_epoch, state.leader_epoch)
    if refused is not None:
        return refused
    owner = info.owners[index]
    if state.leader < 0 or owner < 0 or state.leader != node_id_of(owner):
        # offline too: Kafka's answer, the one every client's fetch path retries on
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return None
