"""A head's heads as at an epoch's end, held past it (TrainConfig.epoch_flow, the direct plane).

With --epoch-flow the blocks run on across an epoch's end (vfl_core.training.direct_stale): a
label party fuses the next epoch's first rounds before it takes the epoch's last steps of its
own tower and the epoch's validation. Fuses touch the heads only and steps the tower only, so
the party's state at the epoch's end is its tower after the last step and its heads before the
next epoch's first fuse: the first call that fuses in the next epoch holds a copy of the heads
(`hold`, RoundCall.hold_heads), and the validation runs with that copy in place (`in_place`):
it predicts with the heads of the epoch's end, and a copy it holds for the late verdict
(Party.hold_snapshot) is the state of the epoch's end, as the in-process federation's. With
--fresh-own-tower a label party's fuse steps its own tower too: the copy holds the tower as well.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vfl_core.training.party import Party

# ModelBank.state_dict's entries of the heads, their optimisers and averages (weight_average)
HEADS = ("heads", "head_opts", "avg_heads")
TOWER = ("reps", "rep_opts", "avg_reps")  # ... and of the towers


def _fused(party: Party) -> tuple[str, ...]:
    """What a fuse changes: the heads, and the own tower with --fresh-own-tower."""
    return HEADS + TOWER if party.laser.fresh_own else HEADS


def hold(party: Party, round_id: int) -> None:
    """Before round `round_id`'s fuse: a copy of what it changes (weights and optimisers) as now."""
    state = party.models.state_dict()
    held = {k: state[k] for k in _fused(party) if k in state}
    party.held_heads = (round_id, copy.deepcopy(held))


@contextmanager
def in_place(party: Party, round_id: int) -> Iterator[None]:
    """Round `round_id`'s validation: with the heads held after it (by a later round's call)
    in place of the current ones, which are back after; the current ones where none is held."""
    held, party.held_heads = party.held_heads, None
    if held is None or held[0] <= round_id:
        yield
        return
    state = party.models.state_dict()
    now = copy.deepcopy({k: state[k] for k in held[1]})
    _load(party, held[1])
    try:
        yield
    finally:
        _load(party, now)


def _load(party: Party, held: dict) -> None:
    party.models.load_state_dict({**{key: {} for key in HEADS + TOWER}, **held})
