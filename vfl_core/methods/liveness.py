"""Which parties the round engine still calls: a small up/down state machine per party.

A party that misses `down_after` consecutive phases is marked down and left out of rounds, except
for a retry every `retry_every` rounds; the first answer brings it back up. A party that registers
again (a restarted or reconnected process) is `rejoining`: it is called at once, its first answer
makes it up, a miss makes it down again. Every transition is logged and kept, so results can count
them.

The state machine lives in the methods layer because a method's round program keeps one of its
own (DVFL's hosts). When no party that can train is up (every label party down), the round
engine pauses instead of running rounds on nothing (vfl_core.training.liveness.Presence);
`retry_now` lets it call the down parties at once while it waits, and `FederationDown` ends a
pause that lasted too long.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from vfl_core.errors import VflError

log = logging.getLogger(__name__)

UP, DOWN, REJOINING = "up", "down", "rejoining"


class FederationDown(VflError):
    """No party that can train came back within the rejoin timeout: the run cannot go on."""


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
    who: str = "party of block"  # how the log names a tracked block ("host" for dvfl's hosts)

    def __post_init__(self) -> None:
        for b in self.blocks:
            self.state.setdefault(b, UP)
            self.missed.setdefault(b, 0)

    def should_call(self, block: int, round_id: int) -> bool:
        if self.state.get(block, UP) in (UP, REJOINING):
            return True
        return (round_id - self.down_since[block]) % self.retry_every == 0

    def live(self, blocks: list[int] | tuple[int, ...]) -> list[int]:
        """The blocks of `blocks` that are not marked down."""
        return [b for b in blocks if self.state.get(b, UP) != DOWN]

    def retry_now(self, round_id: int) -> None:
        """Call every down party at `round_id` (a paused federation probing for survivors);
        later retries count `retry_every` from here."""
        for block, state in self.state.items():
            if state == DOWN:
                self.down_since[block] = round_id

    def answered(self, block: int, round_id: int) -> None:
        self.missed[block] = 0
        if self.state.get(block) in (DOWN, REJOINING):
            self._move(round_id, block, UP, "answered again")

    def rejoined(self, block: int, round_id: int) -> None:
        """The party registered again (restarted or reconnected): call it from now on."""
        self.missed[block] = 0
        if self.state.get(block, UP) != REJOINING:
            self._move(round_id, block, REJOINING, "registered again")

    def failed(self, block: int, round_id: int, phase: str, immediate: bool = False) -> None:
        """`immediate`: mark down at the first miss (inference, where a caller waits)."""
        self.missed[block] = self.missed.get(block, 0) + 1
        state = self.state.get(block, UP)
        limit = 1 if immediate or state == REJOINING else self.down_after
        if state in (UP, REJOINING) and self.missed[block] >= limit:
            self.down_since[block] = round_id
            self._move(round_id, block, DOWN, f"missed {self.missed[block]} phases (last: {phase})")

    def _move(self, round_id: int, block: int, new: str, reason: str) -> None:
        old = self.state.get(block, UP)
        self.state[block] = new
        self.transitions.append(Transition(round_id, block, old, new, reason))
        log.warning("%s %d is %s at round %d: %s", self.who, block, new, round_id, reason)

    def counts(self) -> dict[str, int]:
        """Number of transitions of each kind, e.g. {"up->down": 2, "down->rejoining": 1}."""
        out: dict[str, int] = {}
        for t in self.transitions:
            key = f"{t.old}->{t.new}"
            out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items()))

    def to_state(self) -> dict[str, object]:
        """Plain types for a checkpoint (keys are strings there)."""
        return {
            "state": {str(b): s for b, s in self.state.items()},
            "missed": {str(b): n for b, n in self.missed.items()},
            "down_since": {str(b): r for b, r in self.down_since.items()},
            "transitions": [t.__dict__ for t in self.transitions],
        }

    def load_state(self, saved: dict) -> None:
        self.state.update({int(b): str(s) for b, s in saved["state"].items()})
        self.missed.update({int(b): int(n) for b, n in saved["missed"].items()})
        self.down_since.update({int(b): int(r) for b, r in saved["down_since"].items()})
        self.transitions = [Transition(**t) for t in saved["transitions"]]
