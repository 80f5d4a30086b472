"""Everything a consumer with a ``group_id`` does with its group coordinator. Pure.

`GroupProtocol` composes the pieces and has the shape of the consumer's own protocol object,
which drives it: :meth:`poll` returns the requests to send now (FindCoordinator, the
membership's JoinGroup/SyncGroup/Heartbeat/LeaveGroup, OffsetCommit, OffsetFetch),
:meth:`on_response` / :meth:`on_failure` take the answers, :meth:`next_event` hands the I/O
layer what only it may do (run listeners, commit before a revocation; see `events`).

- `CoordinatorLink`: which node coordinates the group;
- `Subscribed`: the topics or pattern (``subscribe``), matched against metadata;
- `Membership`: the classic group protocol's member state machine;
- `Commits`: commits, committed offsets, and the start positions of new partitions.

An assign()-only consumer with a group uses only the last (and the coordinator): its
partitions start at their committed offsets, and it commits with generation -1.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable

from klog.consumer.group.commits import Commits, CommittedLookup, PendingCommit
from klog.consumer.group.coordinator import CoordinatorLink
from klog.consumer.group.events import Revoke
from klog.consumer.group.membership import Membership
from klog.consumer.group.subscription import Subscribed
from klog.consumer.positions import Assignment
from klog.errors import KlogError
from klog.metadata import ClusterMetadata
from klog.outgoing import Outgoing
from klog.protocol.apis import (
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    offset_commit,
    offset_fetch,
    sync_group,
)
from klog.types import OffsetAndMetadata, TopicPartition

GROUP_APIS = frozenset({find_coordinator, join_group, sync_group, heartbeat, leave_group,
                        offset_commit, offset_fetch})


class GroupProtocol:
    def __init__(self, config, cluster: ClusterMetadata, assignment: Assignment,
                 apply: Callable[[frozenset], None], errors: list[KlogError]):
        self.cluster = cluster
        self.assignment = assignment
        self.errors = errors
        self.events: deque = deque()
        self.coordinator = CoordinatorLink(config.group_id, config.retry_backoff_ms)
        self.subscribed = Subscribed(config.exclude_internal_topics)
        self.membership = Membership(config, cluster, self.coordinator, self.subscribed, apply,
                                     self.events, errors)
        self.commits = Commits(config.group_id, config.retry_backoff_ms, assignment,
                               self.coordinator, self.membership, self.events, errors)
        self.commits.require_stable = config.isolation_level == "read_committed"

    # the application's side ---------------------------------------------------------------

    def subscribe(self, topics=None, pattern: re.Pattern[str] | None = None) -> None:
        if pattern is not None:
            self.subscribed.set_pattern(pattern)
        else:
            self.subscribed.set_topics(topics)
            self.cluster.want(self.subscribed.topics)

    def unsubscribe(self) -> Outgoing | None:
        """Stop being a member: the LeaveGroup to wait for, if one goes out."""
        self.subscribed.clear()
        return self.membership.leave()

    def next_event(self):
        return self.events.popleft() if self.events else None

    def revoked(self, event: Revoke) -> None:
        self.membership.revoked(event)

    def app_polled(self, now_ms: int) -> None:
        self.membership.app_polled(now_ms)

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata], *, retry: bool,
               callback=None) -> PendingCommit:
        return self.commits.commit(offsets, retry=retry, callback=callback)

    def committed(self, partitions) -> CommittedLookup:
        return self.commits.lookup(partitions)

    # the I/O side -------------------------------------------------------------------------

    def poll(self, now_ms: int) -> list[Outgoing]:
        self.commits.start_position_lookup()
        out: list[Outgoing] = []
        if self.subscribed.active or self.commits.busy or self.membership.leaving:
            find = self.coordinator.request(now_ms)
            if find is not None:
                out.append(find)
        out.extend(self.membership.poll(now_ms))
        out.extend(self.commits.requests(now_ms))
        return out

    def next_poll_ms(self, now_ms: int) -> int | None:
        times = [t for t in (self.membership.next_poll_ms(now_ms), self.commits.next_poll_ms())
                 if t is not None]
        if self.subscribed.active or self.commits.busy:
            due = self.coordinator.next_poll_ms()
            if due is not None:
                times.append(due)
        return min(times) if times else None

    def on_metadata(self, response) -> None:
        """Every Metadata answer: a pattern subscription is matched again."""
        if self.subscribed.on_metadata(response):
            self.cluster.want(self.subscribed.topics)

    def on_response(self, request: Outgoing, response, now_ms: int) -> None:
        api = request.api
        if api is find_coordinator:
            error = self.coordinator.on_response(response, now_ms)
            if error is not None:
                self.errors.append(error)
        elif api is offset_commit or api is offset_fetch:
            self.commits.on_response(request, response, now_ms)
        else:
            self.membership.on_response(request, response, now_ms)

    def on_failure(self, request: Outgoing, error: KlogError, now_ms: int) -> None:
        api = request.api
        if api is find_coordinator:
            self.coordinator.on_failure(now_ms, str(error))
        elif api is offset_commit or api is offset_fetch:
            self.commits.on_failure(request, now_ms, str(error))
        else:
            self.membership.on_failure(request, now_ms, str(error))
