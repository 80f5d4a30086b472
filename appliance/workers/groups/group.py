"""One consumer group's membership: Kafka's classic rebalance protocol as a state machine.

Sans-IO and clock-free: every call takes ``now_ms``, answers that must wait (a JoinGroup held
until every member has rejoined, a SyncGroup held until the leader's assignment arrives) are
given as ``respond`` callables and called later, and :meth:`Group.tick` does what time alone
decides (session expiry, the end of the rebalance timeout and of the initial delay). The
coordinator drives it from the worker's loop and persists what :attr:`Group.on_change` reports.

The rules are Kafka's ``GroupCoordinator`` (classic protocol): a join by a new member, a leave,
an expired session or a changed subscription starts a rebalance; the join phase ends when every
known member has rejoined (or the rebalance timeout, the largest of the members'
``max.poll.interval.ms``, passes and the stragglers are dropped); the generation then grows,
the protocol every member supports with the most first-choice votes is chosen, and the leader
alone receives the members' subscriptions. Static members (KIP-345, ``group.instance.id``) keep
their assignment across a restart: a known instance rejoining a stable group with an unchanged
subscription gets a new member id and its old assignment, and nobody else rebalances.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from appliance.workers.groups.state import GroupState, check_transition
from klog.protocol.error_codes import ErrorCode

S = GroupState
log = logging.getLogger(__name__)


class JoinResult(NamedTuple):
    error: ErrorCode
    generation: int = -1
    protocol: str = ""
    leader: str = ""
    member_id: str = ""
    members: tuple = ()  # (member_id, group_instance_id, metadata): the leader's only


class SyncResult(NamedTuple):
    error: ErrorCode
    assignment: bytes = b""


@dataclass(eq=False)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (assignor name, subscription), in preference order
    assignment: bytes = b""
    deadline_ms: int = 0  # the session expires then, unless the member is waiting to join
    awaiting_join: Callable[[JoinResult], None] | None = None
    awaiting_sync: Callable[[SyncResult], None] | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    def names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass
class GroupLimits:
    """The broker settings a group obeys (Kafka's ``group.*`` keys)."""

    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1


def new_member_id(client_id: str) -> str:
    return f"{client_id or 'member'}-{uuid.uuid4()}"


@dataclass(eq=False)
class Group:
    group_id: str
    limits: GroupLimits = field(default_factory=GroupLimits)
    state: GroupState = S.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in joining order
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending: dict[str, int] = field(default_factory=dict)  # ids handed out, not joined: deadline
    rebalance_deadline_ms: int = 0
    join_delay_until_ms: int = 0  # the initial rebalance delay of a group that was empty
    on_change: Callable[[Group], None] = lambda group: None  # persist: a generation completed

    # -- questions ------------------------------------------------------------------------

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def member(self, member_id: str) -> Member | None:
        return self.members.get(member_id)

    def supported_protocols(self) -> set[str]:
        """The assignors every member supports (what a newcomer must share)."""
        sets = [set(m.names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """The commonly supported assignor with the most first-choice votes (ties: the one
        the earliest member prefers), as Kafka's ``selectProtocol``."""
        candidates = self.supported_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name in member.names() if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first = next(iter(self.members.values())).names()
        return max(votes, key=lambda name: (votes[name], -first.index(name)))

    def _fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A static member id that is no longer the instance's current one (a zombie)."""
        return instance_id is not None and self.static.get(instance_id, member_id) != member_id

    def _transition(self, target: GroupState) -> None:
        check_transition(self.state, target)
        self.state = target

    # -- JoinGroup ------------------------------------------------------------------------

    def join(self, *, member_id: str, instance_id: str | None, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: list[tuple[str, bytes]], require_known_member_id: bool,
             respond: Callable[[JoinResult], None], now_ms: int) -> None:
        """Handle a JoinGroup; ``respond`` is called now or when the join phase ends."""
        if self.state is S.DEAD:
            return respond(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id))
        if not self._protocols_fit(protocol_type, protocols):
            return respond(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                                      member_id=member_id))
        details = dict(client_id=client_id, client_host=client_host,
                       session_timeout_ms=session_timeout_ms,
                       rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type,
                       protocols=protocols)
        if member_id == "":
            if instance_id is not None and instance_id in self.static:
                return self._rejoin_static(instance_id, details, respond, now_ms)
            if len(self.members) + len(self.pending) >= self.limits.max_size:
                return respond(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED))
            new_id = new_member_id(client_id)
            if require_known_member_id and instance_id is None:  # KIP-394
                self.pending[new_id] = now_ms + session_timeout_ms
                return respond(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id))
            return self._add_member(new_id, instance_id, details, respond, now_ms)
        if member_id in self.pending:
            del self.pending[member_id]
            return self._add_member(member_id, instance_id, details, respond, now_ms)
        member = self.members.get(member_id)
        if member is None:
            return respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
        if self._fenced(member_id, instance_id):
            return respond(JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=member_id))
        self._rejoin_known(member, details, respond, now_ms)

    def _protocols_fit(self, protocol_type: str, protocols) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        names = {name for name, _ in protocols}
        return protocol_type == self.protocol_type and bool(names & self.supported_protocols())

    def _add_member(self, member_id, instance_id, details, respond, now_ms) -> None:
        member = Member(member_id, instance_id, **details)
        member.awaiting_join = respond
        self.members[member_id] = member
        if instance_id is not None:
            self.static[instance_id] = member_id
        if len(self.members) == 1:  # the first member sets the group's protocol type
            self.protocol_type = member.protocol_type
        if self.state is S.PREPARING_REBALANCE:
            self._extend_initial_delay(now_ms)
            self.try_complete_join(now_ms)
        else:
            self.prepare_rebalance(now_ms, f"new member {member_id} joined")

    def _rejoin_known(self, member: Member, details, respond, now_ms) -> None:
        changed = member.protocols != details["protocols"]
        for key, value in details.items():
            setattr(member, key, value)
        if self.state is S.PREPARING_REBALANCE:
            self._answer_join_later(member, respond)
            self.try_complete_join(now_ms)
        elif self.state is S.COMPLETING_REBALANCE:
            if changed:
                self._answer_join_later(member, respond)
                self.prepare_rebalance(now_ms, f"member {member.member_id} changed its "
                                               f"subscription")
            else:  # a retried JoinGroup whose answer was lost: the same answer again
                respond(self._join_result(member))
        elif self.state is S.STABLE:
            if changed or member.member_id == self.leader:
                self._answer_join_later(member, respond)
                self.prepare_rebalance(now_ms, f"{'leader' if not changed else 'member'} "
                                               f"{member.member_id} rejoined")
            else:
                member.deadline_ms = now_ms + member.session_timeout_ms
                respond(self._join_result(member))
        else:  # EMPTY with a member cannot happen: members leave through _remove
            respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member.member_id))

    def _answer_join_later(self, member: Member, respond) -> None:
        if member.awaiting_join is not None:  # a second JoinGroup replaces the first
            member.awaiting_join(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS,
                                            member_id=member.member_id))
        member.awaiting_join = respond

    def _rejoin_static(self, instance_id, details, respond, now_ms) -> None:
        """A known group.instance.id with no member id: the same consumer, restarted. Its
        subscription bytes may differ (v2+ carries the generation it last saw); what matters,
        as in Kafka, is whether the group would choose another protocol."""
        old_id = self.static[instance_id]
        old = self.members.pop(old_id)
        for waiting, answer in ((old.awaiting_join, JoinResult(ErrorCode.FENCED_INSTANCE_ID,
                                                               member_id=old_id)),
                                (old.awaiting_sync, SyncResult(ErrorCode.FENCED_INSTANCE_ID))):
            if waiting is not None:
                waiting(answer)
        previous_leader = self.leader
        member = Member(new_member_id(details["client_id"]), instance_id, **details,
                        assignment=old.assignment)
        self.members[member.member_id] = member
        self.static[instance_id] = member.member_id
        if self.leader == old_id:
            self.leader = member.member_id
        if self.state is S.STABLE and self.select_protocol() == self.protocol:
            # No rebalance: its old assignment waits for its SyncGroup. The leader id answered
            # is the old one, so a restarted leader does not compute a needless assignment.
            member.deadline_ms = now_ms + member.session_timeout_ms
            self.on_change(self)
            return respond(JoinResult(ErrorCode.NONE, self.generation, self.protocol or "",
                                      previous_leader or "", member.member_id))
        member.awaiting_join = respond
        if self.state is S.PREPARING_REBALANCE:
            self.try_complete_join(now_ms)
        else:
            self.prepare_rebalance(now_ms, f"static member {instance_id} rejoined")

    def _join_result(self, member: Member) -> JoinResult:
        members = ()
        if member.member_id == self.leader:
            members = tuple((m.member_id, m.instance_id, m.metadata_for(self.protocol))
                            for m in self.members.values())
        return JoinResult(ErrorCode.NONE, self.generation, self.protocol or "", self.leader or "",
                          member.member_id, members)

    # -- the rebalance --------------------------------------------------------------------

    def prepare_rebalance(self, now_ms: int, reason: str = "") -> None:
        """Start a join phase: every member must rejoin (its heartbeats say so)."""
        log.info("group %r: preparing to rebalance in state %s, generation %d (%s)",
                 self.group_id, self.state.value, self.generation, reason)
        if self.state is S.COMPLETING_REBALANCE:
            for member in self.members.values():
                member.assignment = b""
                if member.awaiting_sync is not None:
                    member.awaiting_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
                    member.awaiting_sync = None
        was_empty = self.state is S.EMPTY
        self._transition(S.PREPARING_REBALANCE)
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self.rebalance_deadline_ms = now_ms + timeout
        delay = self.limits.initial_rebalance_delay_ms
        self.join_delay_until_ms = min(now_ms + delay, self.rebalance_deadline_ms) \
            if was_empty and delay > 0 else 0
        self.try_complete_join(now_ms)

    def _extend_initial_delay(self, now_ms: int) -> None:
        """Kafka's InitialDelayedJoin: while a new group forms, each newcomer buys time for
        the next one, up to the rebalance timeout."""
        if self.join_delay_until_ms > now_ms:
            self.join_delay_until_ms = min(now_ms + self.limits.initial_rebalance_delay_ms,
                                           self.rebalance_deadline_ms)

    def try_complete_join(self, now_ms: int) -> None:
        if self.state is not S.PREPARING_REBALANCE:
            return
        if now_ms < self.join_delay_until_ms and now_ms < self.rebalance_deadline_ms:
            return
        everyone = all(m.awaiting_join is not None for m in self.members.values())
        if (everyone and not self.pending) or now_ms >= self.rebalance_deadline_ms:
            self._complete_join(now_ms)

    def _complete_join(self, now_ms: int) -> None:
        for member in [m for m in self.members.values() if m.awaiting_join is None]:
            self._remove(member, "did not rejoin within the rebalance timeout")
        self.pending.clear()
        self.generation += 1
        if not self.members:
            self._transition(S.EMPTY)
            self.protocol = self.leader = None  # the protocol type stays, as in Kafka
            self.on_change(self)
            return
        self.protocol = self.select_protocol()
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self._transition(S.COMPLETING_REBALANCE)
        log.info("group %r: generation %d with %d member(s), protocol %s, leader %s",
                 self.group_id, self.generation, len(self.members), self.protocol, self.leader)
        for member in self.members.values():
            respond, member.awaiting_join = member.awaiting_join, None
            member.deadline_ms = now_ms + member.session_timeout_ms
            respond(self._join_result(member))

    # -- SyncGroup, Heartbeat, LeaveGroup ---------------------------------------------------

    def check_member(self, member_id: str, instance_id: str | None,
                     generation: int) -> ErrorCode:
        """Kafka's checks before a member's SyncGroup, Heartbeat or OffsetCommit."""
        if self.state is S.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if self._fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def sync(self, *, member_id: str, instance_id: str | None, generation: int,
             assignments: dict[str, bytes], respond: Callable[[SyncResult], None],
             now_ms: int) -> None:
        error = self.check_member(member_id, instance_id, generation)
        if error is not ErrorCode.NONE:
            return respond(SyncResult(error))
        member = self.members[member_id]
        member.deadline_ms = now_ms + member.session_timeout_ms
        if self.state is S.PREPARING_REBALANCE:
            return respond(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        if self.state is S.STABLE:
            return respond(SyncResult(ErrorCode.NONE, member.assignment))
        member.awaiting_sync = respond  # COMPLETING_REBALANCE
        if member_id == self.leader:
            for other in self.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            self._transition(S.STABLE)
            self.on_change(self)
            for other in self.members.values():
                if other.awaiting_sync is not None:
                    answer, other.awaiting_sync = other.awaiting_sync, None
                    answer(SyncResult(ErrorCode.NONE, other.assignment))

    def heartbeat(self, *, member_id: str, instance_id: str | None, generation: int,
                  now_ms: int) -> ErrorCode:
        if self.state is S.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if self._fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        member.deadline_ms = now_ms + member.session_timeout_ms
        if self.state is S.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def leave(self, *, member_id: str, instance_id: str | None, now_ms: int) -> ErrorCode:
        """LeaveGroup: by member id, or by instance id (v3 batches; an empty member id)."""
        if self.state is S.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if instance_id is not None:
            current = self.static.get(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if member_id and member_id != current:
                return ErrorCode.FENCED_INSTANCE_ID
            member_id = current
        if member_id in self.pending:
            del self.pending[member_id]
            self.try_complete_join(now_ms)
            return ErrorCode.NONE
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove(member, "left the group")
        self._after_removal(now_ms, "a member left")
        return ErrorCode.NONE

    def _remove(self, member: Member, reason: str) -> None:
        log.info("group %r: member %s removed (%s)", self.group_id, member.member_id, reason)
        del self.members[member.member_id]
        if member.instance_id is not None and self.static.get(member.instance_id) == \
                member.member_id:
            del self.static[member.instance_id]
        if member.awaiting_join is not None:
            member.awaiting_join(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                            member_id=member.member_id))
        if member.awaiting_sync is not None:
            member.awaiting_sync(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))

    def _after_removal(self, now_ms: int, reason: str) -> None:
        if self.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self.prepare_rebalance(now_ms, reason)
        else:
            self.try_complete_join(now_ms)

    # -- time -----------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Expire sessions and pending member ids; end a join phase whose time is up."""
        if self.state is S.DEAD:
            return
        for member_id in [m for m, deadline in self.pending.items() if deadline <= now_ms]:
            del self.pending[member_id]
        expired = [m for m in self.members.values()
                   if m.awaiting_join is None and m.deadline_ms <= now_ms]
        for member in expired:
            self._remove(member, "its session timed out")
        if expired:
            self._after_removal(now_ms, "a session timed out")
        self.try_complete_join(now_ms)

    def kill(self) -> None:
        """The group is deleted or its partition is gone: answer everyone waiting."""
        for member in self.members.values():
            if member.awaiting_join is not None:
                member.awaiting_join(JoinResult(ErrorCode.NOT_COORDINATOR,
                                                member_id=member.member_id))
            if member.awaiting_sync is not None:
                member.awaiting_sync(SyncResult(ErrorCode.NOT_COORDINATOR))
            member.awaiting_join = member.awaiting_sync = None
        self.members.clear()
        self.static.clear()
        self.pending.clear()
        self._transition(S.DEAD)
