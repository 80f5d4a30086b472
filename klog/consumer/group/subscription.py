"""What a group consumer subscribes to: a list of topics, or a pattern over topic names. Pure.

A pattern is matched against the *whole* name (Java's ``Pattern.matcher(topic).matches()``)
of every topic in an all-topics Metadata answer, internal topics excluded
(``exclude_internal_topics``); the matching set is re-computed at every such answer, and a
change makes the member rejoin with the new set (`Membership` compares). Until the first
answer a pattern subscription is not ``ready``: joining with an empty topic list would only
cost a second rebalance.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class Subscribed:
    def __init__(self, exclude_internal_topics: bool = True):
        self.exclude_internal = exclude_internal_topics
        self.active = False
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.ready = False

    def set_topics(self, topics: Iterable[str]) -> None:
        self.active, self.pattern, self.ready = True, None, True
        self.topics = frozenset(topics)

    def set_pattern(self, pattern: re.Pattern[str]) -> None:
        if self.pattern is None or self.pattern.pattern != pattern.pattern:
            self.topics, self.ready = frozenset(), False
        self.active, self.pattern = True, pattern

    def clear(self) -> None:
        self.active, self.topics, self.pattern, self.ready = False, frozenset(), None, False

    @property
    def wants_all_topics(self) -> bool:
        """Metadata must list every topic (a pattern is matched against all of them)."""
        return self.active and self.pattern is not None

    def matches(self, topic: str) -> bool:
        """May ``topic`` be assigned to us? (A pattern subscriber accepts a topic the leader
        saw before we did.)"""
        if self.pattern is not None:
            return self.pattern.fullmatch(topic) is not None and not self._internal(topic)
        return topic in self.topics

    def on_metadata(self, response) -> bool:
        """An all-topics Metadata answer: returns True when the matched set changed."""
        if self.pattern is None or response.topics is None:
            return False
        matched = frozenset(t.name for t in response.topics
                            if t.error_code == 0 and self.matches(t.name)
                            and not (self.exclude_internal and t.is_internal))
        changed = matched != self.topics or not self.ready
        self.topics, self.ready = matched, True
        return changed

    def _internal(self, topic: str) -> bool:
        return self.exclude_internal and topic in INTERNAL_TOPICS
