"""Which parties the round engine still calls: a small up/down state machine per party.

A party that misses `down_after` consecutive phases is marked down and left out of rounds, except
for a retry every `retry_every` rounds; the first answer brings it back up. Every transition is
logged and kept, so results can count them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

UP, DOWN = "up", "down"


@dataclass(frozen=True)
class Transition:
    round_id: int
    block: int
    old: str
    new: str
    reason: str


@dataclass
class Liveness:
    blocks: list[int]
    down_after: int = 3
    retry_every: int = 10
    state: dict[int, str] = field(default_factory=dict)
    missed: dict[int, int] = field(default_factory=dict)
    down_since: dict[int, int] = field(default_factory=dict)
    transitions: list[Transition] = field(default_factory=list)

    def __post_init__(self) -> None:
        for b in self.blocks:
            self.state.setdefault(b, UP)
            self.missed.setdefault(b, 0)

    def should_call(self, block: int, round_id: int) -> bool:
        if self.state.get(block, UP) == UP:
            return True
        return (round_id - self.down_since[block]) % self.retry_every == 0

    def answered(self, block: int, round_id: int) -> None:
        self.missed[block] = 0
        if self.state.get(block) == DOWN:
            self._move(round_id, block, UP, "answered again")

    def failed(self, block: int, round_id: int, phase: str, immediate: bool = False) -> None:
        """`immediate`: mark down at the first miss (inference, where a caller waits)."""
        self.missed[block] = self.missed.get(block, 0) + 1
        limit = 1 if immediate else self.down_after
        if self.state.get(block, UP) == UP and self.missed[block] >= limit:
            self.down_since[block] = round_id
            self._move(round_id, block, DOWN, f"missed {self.missed[block]} phases (last: {phase})")

    def _move(self, round_id: int, block: int, new: str, reason: str) -> None:
        old = self.state.get(block, UP)
        self.state[block] = new
        self.transitions.append(Transition(round_id, block, old, new, reason))
        log.warning("party of block %d is %s at round %d: %s", block, new, round_id, reason)
