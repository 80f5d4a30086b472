"""What the group state machine asks of the I/O layer: run the application's code. Pure.

The state machine never calls application code itself: a rebalance listener may commit, which
needs the network, which the I/O layer owns. It queues these events instead; the consumer
handles them at the top of ``poll`` (and of iteration), never inside its network pump:

- `Revoke`: the partitions are about to be given up. The I/O layer commits their positions
  (auto-commit, unless ``lost``), calls ``on_revoke`` (``on_lost`` when the membership was
  lost and nothing can be committed any more), then acknowledges with
  ``GroupProtocol.revoked(event)``; only then does the state machine drop them and go on.
- `Assign`: partitions were added (eager: the whole new assignment); calls ``on_assign``.
- `CommitDone`: an asynchronous commit finished; calls its callback.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from klog.types import TopicPartition


class Revoke(NamedTuple):
    partitions: frozenset[TopicPartition]
    lost: bool = False  # the membership is gone: commits would be refused
    rejoin: bool = False  # cooperative: rejoin once they are given up


class Assign(NamedTuple):
    partitions: frozenset[TopicPartition]


class CommitDone(NamedTuple):
    commit: Any  # a klog.consumer.group.commits.PendingCommit
