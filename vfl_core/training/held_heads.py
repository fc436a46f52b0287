"""A head's heads as at an epoch's end, held past it (TrainConfig.epoch_flow, the direct plane).

With --epoch-flow the blocks run on across an epoch's end (vfl_core.training.direct_stale): a
label party fuses the next epoch's first rounds before it takes the epoch's last steps of its
own tower and the epoch's validation. Fuses touch the heads only and steps the tower only, so
the party's state at the epoch's end is its tower after the last step and its heads before the
next epoch's first fuse: the first call that fuses in the next epoch holds a copy of the heads
(`hold`, RoundCall.hold_heads), and the validation runs with that copy in place (`in_place`):
it predicts with the heads of the epoch's end, and a copy it holds for the late verdict
(Party.hold_snapshot) is the state of the epoch's end, as the in-process federation's.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from vfl_core.model.slots import name_key

if TYPE_CHECKING:
    from vfl_core.training.party import Party

HEADS = ("heads", "head_opts")  # ModelBank.state_dict's entries of the heads and their optimisers


def hold(party: Party, round_id: int) -> None:
    """Before round `round_id`'s fuse: a copy of the heads (weights and optimisers) as now."""
    state = party.models.state_dict()
    party.held_heads = (round_id, copy.deepcopy({k: state[k] for k in HEADS}))


@contextmanager
def in_place(party: Party, round_id: int) -> Iterator[None]:
    """Round `round_id`'s validation: with the heads held after it (by a later round's call)
    in place of the current ones, which are back after; the current ones where none is held."""
    held, party.held_heads = party.held_heads, None
    if held is None or held[0] <= round_id:
        yield
        return
    state = party.models.state_dict()
    now = copy.deepcopy({k: state[k] for k in HEADS})
    _load(party, held[1])
    try:
        yield
    finally:
        _load(party, now)


def _load(party: Party, heads: dict) -> None:
    models = party.models
    for name, sd in heads["heads"].items():
        models.head(name_key(name)).load_state_dict(sd)
        models.head_opts[name_key(name)].load_state_dict(heads["head_opts"][name])
