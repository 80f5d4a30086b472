"""Who coordinates which groups, and what a replicated commit answers: pure decisions.

A group lives in one partition of ``__consumer_offsets`` (``offsets_log.partition_for``), and
the worker that *leads* that partition coordinates it, as in Kafka:

- an appliance alone: the worker owning the partition (it has the only copy);
- cluster mode: the worker whose node the controller made the partition's leader. With more
  than one replica it must also have taken the role (`ReplicaManager` started its leader epoch,
  so every batch the coordinator appends carries it): until then it answers
  COORDINATOR_LOAD_IN_PROGRESS, and a follower answers NOT_COORDINATOR.

The replication factor of the internal topic in cluster mode is
``offsets.topic.replication.factor`` (3), one replica per appliance. With fewer live
appliances than that, the topic is not created and FindCoordinator answers
COORDINATOR_NOT_AVAILABLE, naming the key (Kafka's rule since KIP-115). Capping the factor at
the live appliances instead would make the first group of a fleet still starting, or
rolling, write its commits to fewer copies than configured, for good: nothing grows the
replicas of a topic afterwards. A fleet smaller than the factor sets the key to its size.
"""

from __future__ import annotations

from appliance.control.topics import TopicInfo
from klog.protocol.error_codes import ErrorCode

ALONE = -1  # the "leader epoch" of a partition coordinated by an appliance running alone


class NotEnoughAppliances(ValueError):
    """Fewer live appliances than offsets.topic.replication.factor."""


def offsets_replication_factor(configured: int, live_appliances: int | None) -> int:
    """Replicas of ``__consumer_offsets``: one alone (``live_appliances`` None), else the
    configured factor, which needs that many live appliances (NotEnoughAppliances)."""
    if live_appliances is None:
        return 1
    if live_appliances < configured:
        raise NotEnoughAppliances(
            f"__consumer_offsets needs offsets.topic.replication.factor={configured} live "
            f"appliances to hold its replicas and {live_appliances} are live; it is created "
            f"once they are (a fleet of fewer appliances sets the key to its size)")
    return configured


def coordinator_epoch(info: TopicInfo, partition: int, *, worker_index: int, node_id: int,
                      held: bool, leading_epoch: int | None) -> int | None:
    """The leader epoch in which this worker coordinates the groups of ``partition`` now
    (ALONE for an appliance alone), or None if it does not. ``held``: the worker has the
    partition's log; ``leading_epoch``: the epoch its replication role leads in (None: it
    has no leader role)."""
    if not held or not info.has_partition(partition):
        return None
    if info.leadership is None:
        return ALONE if info.owners[partition] == worker_index else None
    state = info.leadership[partition]
    if state.leader != node_id:
        return None
    if len(state.replicas) > 1 and leading_epoch != state.leader_epoch:
        return None  # the replication role is not taken (yet)
    return state.leader_epoch


def commit_error(error: ErrorCode) -> ErrorCode:
    """What an OffsetCommit answers when its append could not be committed, as Kafka's group
    coordinator maps it: errors every client retries, after looking for the coordinator
    again where it may have moved."""
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR  # leadership moved: find the new coordinator
    if error in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                 ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return error
