"""The ``cooperative-sticky`` assignor (Kafka's CooperativeStickyAssignor, KIP-429). Pure.

Three steps, each a small function:

1. **Who owns what now.** A member's owned partitions (from its subscription) count if it
   still subscribes to the topic and the partition exists. When several members claim one
   partition, the claim of the highest generation wins; claimants tied at the highest
   generation cancel each other (nobody keeps it), as in Java.
2. **A balanced, sticky assignment.** Owners keep their partitions; the others go, hardest
   to place first (fewest eligible members), to the eligible member with the fewest; then
   partitions move from a member to an eligible one with at least two fewer until none can,
   moving partitions the member did not own before others. The result is balanced in
   Kafka's sense (no partition could move to an eligible member with two fewer), and with
   equal subscriptions the counts differ by at most one.
3. **Cooperative staging.** A partition whose new member is not its current owner (or that
   was contested) is withheld from the new member in this rebalance: its owner sees it
   missing from its own assignment, revokes it, and rejoins; the next rebalance hands it
   over. No partition is ever owned by two members at once.

Java's tie-breaking differs in places; that is invisible to other clients, which only follow
the leader's assignment.
"""

from __future__ import annotations

from klog.consumer.assignor_inputs import Assignments, Member, all_partitions, member_order
from klog.types import TopicPartition


def assign_cooperative_sticky(members: list[Member],
                              partitions_per_topic: dict[str, int]) -> Assignments:
    ordered = sorted(members, key=member_order)
    owners, contested = current_owners(ordered, partitions_per_topic)
    target = balanced_assignment(ordered, partitions_per_topic, owners)
    return {m: sorted(tps) for m, tps in withhold_moving(target, owners, contested).items()}


def current_owners(members: list[Member], partitions_per_topic: dict[str, int]
                   ) -> tuple[dict[TopicPartition, str], set[TopicPartition]]:
    """Partition -> its owning member id, and the partitions whose ownership is contested."""
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member in members:
        for tp in member.owned:
            tp = TopicPartition(*tp)
            if tp.topic in member.topics and 0 <= tp.partition < partitions_per_topic.get(
                    tp.topic, 0):
                claims.setdefault(tp, []).append((member.generation, member.member_id))
    owners: dict[TopicPartition, str] = {}
    contested: set[TopicPartition] = set()
    for tp, claimants in claims.items():
        newest = max(generation for generation, _ in claimants)
        top = [member_id for generation, member_id in claimants if generation == newest]
        if len(top) == 1:
            owners[tp] = top[0]
        else:
            contested.add(tp)
    return owners, contested


def balanced_assignment(members: list[Member], partitions_per_topic: dict[str, int],
                        owners: dict[TopicPartition, str]) -> dict[str, set[TopicPartition]]:
    by_id = {m.member_id: m for m in members}
    out: dict[str, set[TopicPartition]] = {m.member_id: set() for m in members}
    rank = {m.member_id: i for i, m in enumerate(members)}
    eligible = {tp: [m.member_id for m in members if tp.topic in m.topics]
                for tp in all_partitions(members, partitions_per_topic)}
    loose = []
    for tp in eligible:
        owner = owners.get(tp)
        if owner is not None and owner in by_id:
            out[owner].add(tp)
        else:
            loose.append(tp)
    loose.sort(key=lambda tp: (len(eligible[tp]), tp))
    for tp in loose:
        taker = min(eligible[tp], key=lambda m: (len(out[m]), rank[m]))
        out[taker].add(tp)
    _rebalance(out, eligible, owners, rank)
    return out


def _rebalance(out: dict[str, set[TopicPartition]], eligible: dict[TopicPartition, list[str]],
               owners: dict[TopicPartition, str], rank: dict[str, int]) -> None:
    """Move partitions from fuller to emptier eligible members until none can move. Each
    move lowers the sum of squared counts, so this ends."""
    while True:
        move = _best_move(out, eligible, owners, rank)
        if move is None:
            return
        tp, source, target = move
        out[source].discard(tp)
        out[target].add(tp)


def _best_move(out, eligible, owners, rank):
    for source in sorted(out, key=lambda m: (-len(out[m]), rank[m])):
        # partitions the source did not own before move first: stickiness
        for tp in sorted(out[source], key=lambda tp: (owners.get(tp) == source, tp)):
            targets = [m for m in eligible[tp] if len(out[m]) + 1 < len(out[source])]
            if targets:
                return tp, source, min(targets, key=lambda m: (len(out[m]), rank[m]))
    return None


def withhold_moving(target: dict[str, set[TopicPartition]], owners: dict[TopicPartition, str],
                    contested: set[TopicPartition]) -> dict[str, set[TopicPartition]]:
    """Step 3: a partition changing hands goes to nobody in this rebalance."""
    return {member: {tp for tp in tps
                     if tp not in contested and owners.get(tp, member) == member}
            for member, tps in target.items()}
