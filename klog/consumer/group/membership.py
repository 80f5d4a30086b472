"""Group membership, Kafka's classic protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup. Pure.

The member's life, as in Java's AbstractCoordinator / ConsumerCoordinator::

    UNJOINED --prepare--> PREPARING --revoked()--> UNJOINED --prepare--> READY
    READY --JoinGroup--> JOINING --leader--> ASSIGNING --SyncGroup--> SYNCING --> STABLE
                                 --follower-----------> SYNCING
    STABLE --rejoin needed--> UNJOINED

*Prepare* gives up what the next join must not carry: every owned partition with the eager
protocol, the partitions of topics no longer subscribed with the cooperative one, and
everything when the membership was lost (then they are *lost*, not revoked: nothing can be
committed). Giving up means a `Revoke` event the I/O layer handles (commit, listener) and
acknowledges; the member prepares again until nothing is left to give up, then joins.

JoinGroup carries one protocol per configured assignor, each with our subscription
(`klog.protocol.group_assignment`, v3: topics, owned partitions, generation). A coordinator
that answers MEMBER_ID_REQUIRED (KIP-394) gets the join again with the id it chose. The
leader computes the assignment with the assignor the coordinator chose, over every member's
subscription, after making sure its metadata covers every topic of the group; each member
applies its share of the SyncGroup answer: eager, the whole assignment is new; cooperative,
partitions it lost are revoked (then it rejoins, KIP-429) and the new ones added.

While STABLE (and while preparing) a Heartbeat goes out every ``heartbeat_interval_ms``.
What an error in an answer makes the member do is the table `REACTIONS`. A consumer that
does not poll for ``max_poll_interval_ms`` leaves the group (LeaveGroup, except for a static
member: its session simply runs out) and rejoins at its next poll.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from klog.consumer.assignors import EAGER, rebalance_protocol
from klog.consumer.group.coordinator import CoordinatorLink
from klog.consumer.group.events import Assign, Revoke
from klog.consumer.group.leader import Leadership
from klog.consumer.group.requests import (
    heartbeat_request,
    join_request,
    leave_request,
    sync_request,
)
from klog.consumer.group.subscription import Subscribed
from klog.errors import CommitFailedError, KafkaError, KlogError, error_for
from klog.metadata import ClusterMetadata
from klog.outgoing import Outgoing
from klog.protocol.apis import heartbeat, join_group, leave_group, sync_group
from klog.protocol.error_codes import ErrorCode
from klog.protocol.exceptions import DecodeError
from klog.protocol.group_assignment import decode_assignment
from klog.types import TopicPartition

log = logging.getLogger(__name__)

UNJOINED, PREPARING, READY, JOINING = "unjoined", "preparing", "ready", "joining"
ASSIGNING, SYNCING, STABLE = "assigning", "syncing", "stable"
NO_GENERATION = -1
LEFT = "left the group"  # the reason when we leave: not worth a warning

REJOIN, RESET, REFIND, RETRY = "rejoin", "reset", "refind", "retry"
_COMMON = {
    ErrorCode.NOT_COORDINATOR: REFIND,  # the coordinator moved: find it, try again
    ErrorCode.COORDINATOR_NOT_AVAILABLE: REFIND,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: RETRY,  # same request after retry_backoff_ms
    ErrorCode.REBALANCE_IN_PROGRESS: REJOIN,  # keep member id and generation, join again
    ErrorCode.UNKNOWN_MEMBER_ID: RESET,  # the membership is gone: new member id, join again
    ErrorCode.ILLEGAL_GENERATION: RESET,
}
#: What an error code in each answer makes the member do; a code not listed is fatal (the
#: application sees it from poll). MEMBER_ID_REQUIRED is JoinGroup's own case.
REACTIONS = {
    join_group: {**_COMMON, ErrorCode.REBALANCE_IN_PROGRESS: RETRY},
    sync_group: _COMMON,
    heartbeat: _COMMON,
}


class Membership:
    def __init__(self, config, cluster: ClusterMetadata, coordinator: CoordinatorLink,
                 subscribed: Subscribed, apply: Callable[[frozenset], None], events,
                 errors: list[KlogError]):
        self.config = config
        self.group_id: str = config.group_id
        self.instance_id: str | None = config.group_instance_id
        self.protocol_kind = rebalance_protocol(config.partition_assignment_strategy)
        self.cluster = cluster
        self.coordinator = coordinator
        self.subscribed = subscribed
        self.apply = apply  # sets the consumer's partitions (new ones start at COMMITTED)
        self.events = events
        self.errors = errors
        self.state = UNJOINED
        self.member_id = ""
        self.generation = NO_GENERATION
        self.protocol: str | None = None
        self.leader_id: str | None = None
        self.owned: frozenset[TopicPartition] = frozenset()
        self.rejoin_reason: str | None = None
        self.joined_topics: frozenset[str] = frozenset()
        self.leaving: Outgoing | None = None
        self.last_heartbeat_ms = 0
        self._outbox: list[Outgoing] = []
        self._in_flight: Outgoing | None = None  # the JoinGroup or SyncGroup
        self._heartbeat_in_flight = False
        self._retry_at_ms = 0
        self._unacked: Revoke | None = None
        self._joining_topics: frozenset[str] = frozenset()
        self._leadership: Leadership | None = None  # while we lead the generation
        self.last_app_poll_ms: int | None = None
        self._poll_expired = False

    # what the rest of the consumer asks ---------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id is not None and self.leader_id == self.member_id

    def identity(self):
        """(generation, member id, instance id) for an OffsetCommit, or the error why none
        can be made now (a subscribed consumer outside a stable generation)."""
        if not self.subscribed.active:
            return NO_GENERATION, "", None
        if self.state in (STABLE, PREPARING) and self.generation >= 0:
            return self.generation, self.member_id, self.instance_id
        return CommitFailedError(
            "not a member of a stable group generation (rebalancing): poll() to rejoin, then "
            "commit", ErrorCode.REBALANCE_IN_PROGRESS)

    def heartbeat_target(self):
        """What a background heartbeat needs while we are a member, else None."""
        if self.state in (STABLE, PREPARING) and self.generation >= 0 and self.coordinator.known:
            return (self.coordinator.address, self.group_id, self.generation, self.member_id,
                    self.instance_id)
        return None

    def request_rejoin(self, reason: str) -> None:
        if self.state == STABLE and self.rejoin_reason is None:
            log.info("group %r: rebalancing: %s", self.group_id, reason)
            self.rejoin_reason = reason

    def reset_generation(self, reason: str, generation: int | None = None) -> None:
        """The coordinator no longer knows us (or this generation): owned partitions are lost;
        join again as a new member (a static member keeps its instance id)."""
        if generation is not None and generation != self.generation:
            return  # about an older generation: already handled
        if reason == LEFT:
            log.info("group %r: member %r left generation %d", self.group_id, self.member_id,
                     self.generation)
        else:
            log.warning("group %r: member %r of generation %d lost its membership (%s)",
                        self.group_id, self.member_id, self.generation, reason)
        self.generation, self.member_id = NO_GENERATION, ""
        self.protocol = self.leader_id = self._leadership = None
        self._in_flight = None
        self._heartbeat_in_flight = False
        if self.state != PREPARING:
            self.state = UNJOINED
        self.rejoin_reason = reason

    def app_polled(self, now_ms: int) -> None:
        """The application polled: the max_poll_interval_ms clock starts again."""
        self._check_poll_interval(now_ms)
        self.last_app_poll_ms = now_ms
        self._poll_expired = False

    def revoked(self, event: Revoke) -> None:
        """The I/O layer handled a Revoke: drop the partitions, go on."""
        if event is not self._unacked:
            return
        self._unacked = None
        self.owned -= event.partitions
        self.apply(self.owned)
        if self.state == PREPARING:
            self.state = UNJOINED  # prepare again: nothing left to give up, then join
        if event.rejoin:
            self.request_rejoin("partitions were revoked (cooperative rebalance)")

    def leave(self) -> Outgoing | None:
        """Leave the group (close, unsubscribe): a LeaveGroup unless we are static (Kafka's
        rule: a static member's partitions wait for it until its session times out)."""
        request = None
        if self.instance_id is None and self.member_id and self.coordinator.known:
            request = self.leaving = leave_request(self.config, self.coordinator.node,
                                                   self.member_id)
            self._outbox.append(request)
        self.reset_generation(LEFT)
        self.state, self.rejoin_reason, self._unacked = UNJOINED, None, None
        self.owned = frozenset()
        return request

    # requests -----------------------------------------------------------------------------

    def poll(self, now_ms: int) -> list[Outgoing]:
        out, self._outbox = self._outbox, []
        if not self.subscribed.active:
            return out
        self._check_poll_interval(now_ms)
        self._check_changes()
        if self.state == STABLE and self.rejoin_reason is not None and self._unacked is None:
            self.state = UNJOINED  # (a revocation under way still needs our generation)
        if self.state == UNJOINED and self._unacked is None:
            self._prepare()
        if not self.coordinator.known:
            return out
        if (self.state == READY and now_ms >= self._retry_at_ms and self.subscribed.ready
                and not self._poll_expired):
            out.append(self._join_request())
        elif self.state == ASSIGNING:
            request = self._try_assign()
            if request is not None:
                out.append(request)
        if self._heartbeat_due(now_ms) <= now_ms:
            out.append(self._heartbeat_request(now_ms))
        return out

    def next_poll_ms(self, now_ms: int) -> int | None:
        if self.state == READY:
            return max(now_ms, self._retry_at_ms)
        due = self._heartbeat_due(now_ms)
        return None if due == _NEVER else due

    def _heartbeat_due(self, now_ms: int) -> int:
        if (self.state not in (STABLE, PREPARING) or self.generation < 0
                or self._heartbeat_in_flight or not self.coordinator.known):
            return _NEVER
        return self.last_heartbeat_ms + self.config.heartbeat_interval_ms

    def _prepare(self) -> None:
        lost = self.generation < 0
        if lost or self.protocol_kind == EAGER:
            give_up = self.owned
        else:
            give_up = frozenset(tp for tp in self.owned if not self.subscribed.matches(tp.topic))
        if give_up:
            self._unacked = Revoke(give_up, lost=lost)
            self.events.append(self._unacked)
            self.state = PREPARING
        else:
            self.state = READY

    def _join_request(self) -> Outgoing:
        self.state, self.rejoin_reason = JOINING, None
        self._joining_topics = self.subscribed.topics
        self._in_flight = join_request(self.config, self.coordinator.node, self.member_id,
                                       self.generation, self._joining_topics, self.owned)
        return self._in_flight

    def _sync_request(self, assignments: list) -> Outgoing:
        self.state = SYNCING
        self._in_flight = sync_request(self.config, self.coordinator.node, self.member_id,
                                       self.generation, assignments)
        return self._in_flight

    def _heartbeat_request(self, now_ms: int) -> Outgoing:
        self._heartbeat_in_flight = True
        self.last_heartbeat_ms = now_ms
        return heartbeat_request(self.config, self.coordinator.node, self.member_id,
                                 self.generation)

    def _try_assign(self) -> Outgoing | None:
        """The leader's SyncGroup, once its metadata covers the group's topics."""
        try:
            assignments = self._leadership.assignments(self.cluster)  # type: ignore[union-attr]
        except KafkaError as exc:
            self.errors.append(exc)
            self.reset_generation(str(exc))
            return None
        return None if assignments is None else self._sync_request(assignments)

    # answers ------------------------------------------------------------------------------

    def on_response(self, request: Outgoing, response, now_ms: int) -> None:
        if request.api is leave_group:
            if request is self.leaving:
                self.leaving = None
            return
        if request.api is heartbeat:
            self._heartbeat_in_flight = False
            generation, member_id = request.context
            if generation == self.generation and member_id == self.member_id:
                self._react(heartbeat, ErrorCode(response.error_code), now_ms)
            return
        if request is not self._in_flight:
            return  # a join or sync of a membership since reset
        self._in_flight = None
        code = ErrorCode(response.error_code)
        if code != ErrorCode.NONE:
            self._on_join_error(request, response, code, now_ms)
        elif request.api is join_group:
            self._on_joined(response)
        else:
            self._on_synced(response.assignment, now_ms)

    def on_failure(self, request: Outgoing, now_ms: int, reason: str) -> None:
        if request.api is leave_group:
            if request is self.leaving:
                self.leaving = None
            return
        if request.api is heartbeat:
            self._heartbeat_in_flight = False
        elif request is self._in_flight:
            self._in_flight = None
            self.state = READY if request.api is join_group else UNJOINED
        self.coordinator.lost(now_ms, f"{request.api.SPEC.name}: {reason}")

    def on_background_heartbeat(self, code: int, generation: int, member_id: str,
                                now_ms: int) -> None:
        """The blocking consumer's heartbeat thread got an answer while the application
        worked; it counts as ours if it was about our current membership. While our own
        JoinGroup is out, it does not: the thread's connection may answer after the group
        moved on to the generation that JoinGroup is about to bring us (ILLEGAL_GENERATION
        for a member that is not lost), and the join's answer settles it anyway."""
        if generation == self.generation and member_id == self.member_id:
            self.last_heartbeat_ms = max(self.last_heartbeat_ms, now_ms)
            if self.state != JOINING:
                self._react(heartbeat, ErrorCode(code), now_ms)

    def _on_join_error(self, request, response, code: ErrorCode, now_ms: int) -> None:
        if request.api is join_group and code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id  # KIP-394: join again at once with it
            self.state = READY
            return
        self._react(request.api, code, now_ms)
        if request.api is join_group and self.state == JOINING:
            self.state = READY  # RETRY / REFIND: the same join again
        elif self.state in (JOINING, SYNCING):
            self.state = UNJOINED

    def _react(self, api, code: ErrorCode, now_ms: int) -> None:
        if code == ErrorCode.NONE:
            return
        reaction = REACTIONS[api].get(code)
        name = api.SPEC.name
        if reaction == REFIND:
            self.coordinator.lost(now_ms, f"{name}: {code.name}")
        elif reaction == RETRY:
            self._retry_at_ms = now_ms + self.config.retry_backoff_ms
        elif reaction == REJOIN:
            self.request_rejoin(f"{name}: {code.name}")
            if self.state in (JOINING, SYNCING):
                self.state = UNJOINED
        elif reaction == RESET:
            self.reset_generation(f"{name}: {code.name}")
        else:
            log.error("group %r: %s failed: %s", self.group_id, name, code.name)
            self.errors.append(error_for(code, f"{name} for group {self.group_id!r}"))
            self._retry_at_ms = now_ms + self.config.retry_backoff_ms
            if self.state in (JOINING, SYNCING):
                self.state = UNJOINED

    def _on_joined(self, response) -> None:
        self.generation = response.generation_id
        self.member_id = response.member_id
        self.protocol = response.protocol_name
        self.leader_id = response.leader
        self.joined_topics = self._joining_topics
        log.info("group %r: joined generation %d as %r (%s, protocol %s)", self.group_id,
                 self.generation, self.member_id,
                 "leader" if self.is_leader else "follower", self.protocol)
        if self.is_leader:
            self.state = ASSIGNING
            self._leadership = Leadership(response)
        else:
            self._leadership = None
            self._outbox.append(self._sync_request([]))

    def _on_synced(self, data, now_ms: int) -> None:
        try:
            assignment = decode_assignment(data)
        except DecodeError as exc:
            self.errors.append(KlogError(f"group {self.group_id!r}: bad assignment: {exc}"))
            self.state = UNJOINED
            return
        new = frozenset(TopicPartition(t, p) for t, ps in assignment.partitions.items()
                        for p in ps)
        foreign = frozenset(tp for tp in new if not self.subscribed.matches(tp.topic))
        self.state = STABLE
        self.last_heartbeat_ms = now_ms
        if foreign:
            new -= foreign
            self.request_rejoin("assigned topics we do not subscribe to")
        revoked, added = self.owned - new, new - self.owned
        log.info("group %r generation %d: assigned %s%s", self.group_id, self.generation,
                 _names(new), f", revoking {_names(revoked)}" if revoked else "")
        self.owned = self.owned | new
        self.apply(self.owned)
        if revoked:
            self._unacked = Revoke(revoked, rejoin=True)
            self.events.append(self._unacked)
        self.events.append(Assign(new if self.protocol_kind == EAGER else added))

    # changes that call for a rebalance ----------------------------------------------------

    def _check_poll_interval(self, now_ms: int) -> None:
        last = self.last_app_poll_ms
        if (last is None or now_ms - last <= self.config.max_poll_interval_ms
                or not (self.member_id or self.generation >= 0)):
            return
        if self.instance_id is None and self.member_id and self.coordinator.known:
            self._outbox.append(leave_request(self.config, self.coordinator.node,
                                              self.member_id))
        self.reset_generation(f"no poll for {now_ms - last} ms (max_poll_interval_ms)")
        self._poll_expired = True

    def _check_changes(self) -> None:
        if self.state != STABLE:
            return
        if self.subscribed.ready and self.subscribed.topics != self.joined_topics:
            self.request_rejoin("the subscription changed")
        if self._leadership is not None:
            reason = self._leadership.changed(self.cluster)
            if reason is not None:
                self.request_rejoin(reason)


_NEVER = 2**63


def _names(partitions) -> str:
    """`topic-partition` names for the log, sorted."""
    return "[" + ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(partitions)) + "]"
