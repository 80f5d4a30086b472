"""A replicated partition's role here, as the fleet's controller decided it, and the leader's
books on its followers.

The controller's partition state (`PartitionLeadership`: leader, leader epoch, replicas, ISR)
becomes a `Role` on each replica that holds the partition. A leader's role also keeps, per
follower, the log end its last fetch stated and when it last caught up (Kafka's
`lastCaughtUpTime`); from those come the high watermark (the lowest log end in the ISR) and
the followers that have fallen behind for longer than `replica.lag.time.max.ms`. Pure data
and arithmetic: the `Partition` applies the outcome.

The high watermark counts the maximal ISR (KIP-497): the ISR as written, plus a replica this
leader has asked to add and not heard back about. The controller may write that ISR, and a
reassignment elect the added replica, before the answer reaches this leader; a high watermark
that went on without the added replica meanwhile would have acknowledged records its new
leader does not hold. A shrink asked for counts the larger, written ISR until it is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from appliance.control.topics import PartitionLeadership


@dataclass
class Role:
    state: PartitionLeadership  # the controller's decision, the one shape workers see
    leading: bool
    follower_ends: dict[int, int] = field(default_factory=dict)  # leader only: node -> LEO
    # leader only: when each follower last caught up, i.e. fetched at the leader's log end as
    # it was when the follower's previous fetch was read (Kafka's lastCaughtUpTime)
    caught_up_at: dict[int, float] = field(default_factory=dict)
    end_at_last_fetch: dict[int, int] = field(default_factory=dict)
    # leader only: node -> the log start its last fetch stated (Fetch v5+), for DeleteRecords
    follower_starts: dict[int, int] = field(default_factory=dict)
    isr_asked_at: float = 0.0  # monotonic time of the last ISR change asked for
    isr_pending: bool = False  # an ISR change asked for and not answered yet
    pending_isr: tuple[int, ...] = ()  # the ISR asked for while `isr_pending`

    @classmethod
    def of(cls, state: PartitionLeadership, node_id: int, *, now: float) -> Role:
        """The role `state` gives the replica on `node_id`. A new leader gives every follower
        a full lag period from now."""
        leading = state.leader == node_id
        role = cls(state, leading)
        if leading:
            role.caught_up_at = dict.fromkeys(state.replicas, now)
        return role

    def same_term(self, state: PartitionLeadership, node_id: int) -> bool:
        """Whether `state` keeps this role (same leader, same epoch): only the replicas and
        the ISR may have changed."""
        return (self.leading == (state.leader == node_id) and self.state.leader == state.leader
                and self.state.leader_epoch == state.leader_epoch)

    def with_isr(self, isr: tuple[int, ...]) -> None:
        self.state = replace(self.state, isr=tuple(isr))

    def ask_isr(self, isr: tuple[int, ...], now: float, retry_s: float) -> bool:
        """Note an ISR change about to be asked for; False (nothing noted) while one is
        pending or the last was asked less than `retry_s` ago."""
        if self.isr_pending or now - self.isr_asked_at < retry_s:
            return False
        self.isr_asked_at, self.isr_pending, self.pending_isr = now, True, tuple(isr)
        return True

    def isr_answered(self) -> None:
        """The change asked for was written or refused: the written ISR counts alone again."""
        self.isr_pending, self.pending_isr = False, ()

    def maximal_isr(self) -> tuple[int, ...]:
        """The written ISR and any replica asked to join it (module docstring)."""
        if not self.pending_isr:
            return self.state.isr
        return tuple(dict.fromkeys(self.state.isr + self.pending_isr))

    def note_fetch(self, replica: int, fetch_offset: int, log_end: int, now: float) -> None:
        """A follower fetched at `fetch_offset` (its log end now) while ours was `log_end`."""
        self.follower_ends[replica] = fetch_offset
        if fetch_offset >= min(log_end, self.end_at_last_fetch.get(replica, log_end)):
            self.caught_up_at[replica] = now
        self.end_at_last_fetch[replica] = log_end

    def others_in_sync(self, node_id: int) -> list[int]:
        return [r for r in self.state.isr if r != node_id]

    def high_watermark(self, own_end: int, node_id: int) -> int | None:
        """The lowest log end in the maximal ISR, ours included; None while a follower of it
        has not fetched from this leader yet (it holds the high watermark still)."""
        ends = [own_end]
        for replica in self.maximal_isr():
            if replica == node_id:
                continue
            end = self.follower_ends.get(replica)
            if end is None:
                return None
            ends.append(end)
        return min(ends)

    def lagging(self, node_id: int, now: float, lag_s: float) -> list[int]:
        """Followers of the ISR that have not caught up for longer than `lag_s`."""
        return [r for r in self.others_in_sync(node_id)
                if now - self.caught_up_at.get(r, now) > lag_s]
