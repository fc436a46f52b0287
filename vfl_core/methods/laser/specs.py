"""LASER-VFL and the baselines it is measured against (the paper's Table 1 and the fault
benchmark): one frozen `MethodSpec` each (vfl_core.methods.spec), and the task rules that say
which loss terms a head party trains on a batch. They run on the engine's Embed/Fuse/Backward
rounds and the Party's fuse (vfl_core.training.party), so they need no round program or steps.

laser          one head per label party on the mean of any subset containing it, LASER task sampling
local          each party on its own block alone
ensemble       local predictors; at inference the observing parties vote (random tie-break)
svfl           standard VFL: one head at the active party on the concatenation of all K blocks,
               trained on fully observed batches only; a sample with a missing block gets a random
               prediction, as in the paper
vanilla        the DLVM paper's Vanilla VFL: svfl's training, but at inference the active party
               predicts for any observed set with zeros in place of the missing embeddings
combinatorial  one independent predictor per subset S (own representation models and a head at the
               lowest label block of S), used for exactly the observed set
plug           PlugVFL: the active party's head on the concatenation with zeros for missing blocks,
               party-wise dropout of observed embeddings while training
zerofill       split learning that zero-fills a missing party's embedding (PlugVFL without dropout)
stale          split learning that reuses the last embedding the active party received from a
               missing party for the same training sample (zeros if it never had one, and at
               inference, where no test sample has a past embedding; vfl_core.methods.laser.stale)
The last two, with `svfl` (which skips a round unless every party answered), are the split-learning
baselines of the fault benchmark (DVFL's setting): they differ only in what replaces a party that
failed during training. The active party is the lowest block that holds labels.
"""

from __future__ import annotations

from dataclasses import replace

from vfl_core.methods.spec import (
    SHARED,
    HeadTask,
    MethodSpec,
    TaskContext,
    active_party,
    all_subsets,
    owner,
)

PLUG_DROPOUT = 0.5  # probability that an observed non-active block is dropped in a PlugVFL step


# ---------------------------------------------------------------- task rules (loss terms per batch)


def laser_tasks(c: TaskContext) -> list[HeadTask]:
    """One sampled subset per size containing the party, weighted a_i, then one per size of the
    present feature-only blocks, weighted b_i (vfl_core.methods.laser.objective)."""
    from vfl_core.methods.laser.objective import head_tasks  # it needs torch; the registry must not

    tasks = head_tasks(c.block, c.present, c.unlabelled, c.rng)
    return [HeadTask(SHARED, s, w) for s, w in tasks]


def own_block_task(c: TaskContext) -> list[HeadTask]:
    return [HeadTask(SHARED, (c.block,), 1.0)]


def full_set_task(c: TaskContext) -> list[HeadTask]:
    """The active party on a fully observed batch (standard VFL)."""
    full = len(c.present) == c.num_blocks and c.block == active_party(c.label_blocks)
    return [HeadTask(SHARED, c.present, 1.0)] if full else []


def present_task(c: TaskContext) -> list[HeadTask]:
    """The active party on whatever blocks it has (absent ones filled in by the fusion)."""
    active = c.block == active_party(c.label_blocks)
    return [HeadTask(SHARED, c.present, 1.0)] if active else []


def plug_task(c: TaskContext) -> list[HeadTask]:
    """The active party on the present blocks, each other block dropped with PLUG_DROPOUT."""
    if c.block != active_party(c.label_blocks):
        return []
    kept = [b for b in c.present if b == c.block or c.rng.random() >= PLUG_DROPOUT]
    return [HeadTask(SHARED, tuple(kept), 1.0)]


def subset_tasks(c: TaskContext) -> list[HeadTask]:
    """One term per subset of the present blocks that this party owns, on its own head."""
    return [
        HeadTask(s, s, 1.0) for s in all_subsets(c.present) if owner(s, c.label_blocks) == c.block
    ]


# ---------------------------------------------------------------- the registry


# ---------------------------------------------------------------- the specs

SVFL = MethodSpec(
    name="svfl",
    display_name="Standard VFL",
    fusion="concat",
    slots="shared",
    heads="active_party",
    tasks=full_set_task,
    combination="heads",
    replacement="skip",
    needs_all_blocks=True,
)
# The DLVM paper's Vanilla VFL: svfl's training, zeros for missing embeddings at inference.
VANILLA = replace(SVFL, name="vanilla", display_name="Vanilla VFL", zero_imputes=True)


LASER_SPECS: tuple[MethodSpec, ...] = (
    MethodSpec(
        name="laser",
        display_name="LASER-VFL",
        fusion="mean",
        slots="shared",
        heads="label_parties",
        tasks=laser_tasks,
        combination="heads",
        replacement="nothing",
        serves_feature_only=True,
    ),
    MethodSpec(
        name="local",
        display_name="Local",
        fusion="mean",
        slots="shared",
        heads="label_parties",
        tasks=own_block_task,
        combination="heads",
        replacement="nothing",
        own_block_only=True,
    ),
    MethodSpec(
        name="ensemble",
        display_name="Ensemble",
        fusion="mean",
        slots="shared",
        heads="label_parties",
        tasks=own_block_task,
        combination="vote",
        replacement="nothing",
        own_block_only=True,
    ),
    SVFL,
    VANILLA,
    MethodSpec(
        name="combinatorial",
        display_name="Combinatorial",
        fusion="concat_slots",
        slots="per_subset",
        heads="subset_owner",
        tasks=subset_tasks,
        combination="subset",
        replacement="nothing",
    ),
    MethodSpec(
        name="plug",
        display_name="PlugVFL",
        fusion="concat",
        slots="shared",
        heads="active_party",
        tasks=plug_task,
        combination="heads",
        replacement="zeros",
    ),
    MethodSpec(
        name="zerofill",
        display_name="Zero-fill split learning",
        fusion="concat",
        slots="shared",
        heads="active_party",
        tasks=present_task,
        combination="heads",
        replacement="zeros",
    ),
    MethodSpec(
        name="stale",
        display_name="Stale-embedding split learning",
        fusion="concat",
        slots="shared",
        heads="active_party",
        tasks=present_task,
        combination="heads",
        replacement="stale",
    ),
)
