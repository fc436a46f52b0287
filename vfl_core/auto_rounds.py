"""The tables' default rounds (issue 43; docs/tabular-defaults.md, "Rounds over a network").

Exact LASER-VFL rounds (the paper's Algorithm 1) cost compute plus one round trip each, so over
a 50 ms link a table's run waits mostly on the network (benchmarks/results/wan.md). A run on
tabular parties that leaves TrainConfig.staleness, overlap_validation and epoch_flow unset
(None) therefore trains with bounded staleness (AUTO_STALENESS: a feature party's embedding may
miss up to that many earlier rounds of its own updates), early stopping's verdict off the
critical path, the blocks of rounds run on across an epoch's end (AUTO_EPOCH_FLOW) and the label
party's own tower exact (AUTO_FRESH_OWN_TOWER, with one label party), and asks for the direct
data plane where the parties reach each other (TrainConfig.plane). That is a named deviation
from the paper's exact rounds, whose cost in quality is measured in
benchmarks/results/tabular.md (`tabular-sweep-fresh-own-s5-flow`). Images, methods with stages
and anything that needs exact rounds keep them; an explicit `--staleness 0` too.

The own tower is the one option a party cannot resolve alone: with several label parties the
other heads read each label party's embedding, which the option leaves at zeros. The federation
resolves it (it knows the label parties) and its Embed calls say it to the one label party
(EmbedCall.fresh_own), over either transport. A party resolves it as for one label party, then
records what every training Embed call says the federation resolved (EmbedCall.own_tower;
vfl_core.methods.laser.fresh_own.record), so that its checkpoints' config is the run record's;
it acts on the calls, not on its copy.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from vfl_core.errors import ConfigError
from vfl_core.model.model_config import resolved_lane

if TYPE_CHECKING:
    from vfl_core.config import TrainConfig

log = logging.getLogger(__name__)

# A table's staleness when the config leaves it unset: the `fresh-own-s5` recipe of wan.md.
AUTO_STALENESS = 5
# Whether the tables' default also runs the blocks of rounds on across an epoch's end
# (TrainConfig.epoch_flow; tabular.md's `tabular-sweep-fresh-own-s5-flow`).
AUTO_EPOCH_FLOW = True
# Whether the tables' default keeps the label party's own tower exact (TrainConfig.
# fresh_own_tower), where the federation has one label party.
AUTO_FRESH_OWN_TOWER = True


def needs_exact(train: TrainConfig) -> str | None:
    """What in `train` needs exact rounds (or the relay, which the tables' recipe leaves for the
    direct plane), in words; None: nothing does."""
    if train.local_steps:
        return "--local-steps reuses each round's own tensors"
    if train.spec.program is not None:
        return f"method {train.method} runs steps of its own"
    if train.encrypt_relay:
        return "--encrypt-relay asks for the sealed relay"
    return None


# Why a run with injected faults keeps exact rounds (both transports).
FAULTS = "injected faults (--fault-rate, --link-loss) act on the relay's calls"


def pin_exact(train: TrainConfig, why: str | None) -> TrainConfig:
    """`train` with exact rounds (staleness 0) where the caller needs them (`why`: injected
    faults, the sequential engine) and the config left staleness unset: what every party is
    told, so that none resolves the tables' staleness on its own."""
    if why is None or train.staleness is not None:
        return train
    log.info("staleness unset: exact rounds (0), as %s", why)
    return train.model_copy(update={"staleness": 0})


def resolve(
    train: TrainConfig,
    tabular: bool,
    why_exact: str | None = None,
    quiet: bool = False,
    label_parties: int | None = None,
) -> TrainConfig:
    """`train` with staleness, overlap_validation, epoch_flow, data_plane and round_loss
    concrete: the tables' recipe where the config leaves them unset, the data are tables, the
    method has no stages and nothing needs exact rounds (one log line says why it keeps them,
    unless `quiet`: a party, whose coordinator says it); else exact rounds. A staleness given
    keeps the others as given (off where unset, but the late verdict that a given --epoch-flow
    needs).
    fresh_own_tower is resolved for `label_parties` label parties, the federation's; a party
    (None) resolves it as for one, acts on the federation's Embed calls instead
    (EmbedCall.fresh_own) and records what they say (EmbedCall.own_tower)."""
    tables = tabular and train.spec.program is None
    staleness, recipe = train.staleness, False
    if staleness is None:
        why = why_exact or needs_exact(train)
        if tabular and why is not None and not quiet:
            log.info("staleness unset: exact rounds (0) on these tables, as %s", why)
        recipe = tables and why is None  # an explicit staleness keeps the rest as given
        staleness = AUTO_STALENESS if recipe else 0
    overlap = train.overlap_validation
    if overlap is None:  # --epoch-flow given needs the late verdict
        overlap = recipe or (bool(train.epoch_flow) and staleness > 0)
    flow = train.epoch_flow
    if flow is None:
        flow = AUTO_EPOCH_FLOW and recipe and overlap
    elif flow and not (staleness and overlap):
        raise ConfigError(
            "--epoch-flow runs the blocks of --staleness on across an epoch's end, with the "
            f"verdict of --overlap-validation: this run has staleness {staleness} and "
            f"overlap-validation {'on' if overlap else 'off'}"
        )
    update = {
        "staleness": staleness,
        "overlap_validation": overlap,
        "epoch_flow": flow,
        "data_plane": train.plane(tabular),
        "round_loss": round_loss(train.round_loss, tables),
    }
    update["fresh_own_tower"] = own_tower(train, staleness, recipe, label_parties or 1)
    # the linear head's lanes: tables, LASER-VFL's heads, feature towers that learn (withhold
    # keeps them fixed, as --privacy-feature-tower and pretraining need)
    lanes = tabular and train.spec.has_subset_predictors
    lanes = lanes and train.privacy.gradient_defence != "withhold"
    update["model"] = train.model.model_copy(
        update={"linear_lane": resolved_lane(train.model, lanes)}
    )
    return train.model_copy(update=update)


def round_loss(given: str, tables: bool) -> str:
    """TrainConfig.round_loss resolved: as given, else "rows" on tables (a method without
    stages), "mean" elsewhere (the paper benchmarks' and the images' runs as before)."""
    if given != "auto":
        return given
    return "rows" if tables else "mean"


def own_tower(train: TrainConfig, staleness: int, recipe: bool, label_parties: int) -> bool:
    """TrainConfig.fresh_own_tower resolved for a federation of `label_parties` label parties
    at `staleness` (resolved): as given (refused with several, under staleness), else on with
    the tables' recipe (`recipe`) and one label party; several: off, with one log line why."""
    given = train.fresh_own_tower
    recipe = recipe and staleness > 0
    if given is not None:
        if given and label_parties > 1 and staleness > 0:
            raise ConfigError(
                f"--fresh-own-tower needs one label party, not {label_parties}: the other "
                "heads train on each label party's embedding as it sent it"
            )
        return given
    if recipe and AUTO_FRESH_OWN_TOWER and label_parties > 1:
        log.info(
            "fresh_own_tower unset: off, as %d label parties read each other's embeddings",
            label_parties,
        )
        return False
    return recipe and AUTO_FRESH_OWN_TOWER


def check_mixed(train: TrainConfig, shapes: list[tuple[int, ...]]) -> None:
    """Refuse unset staleness in a federation of tables and images: each party resolves it from
    its own features (vfl_core.training.party), so they would disagree."""
    kinds = {len(shape) == 1 for shape in shapes}
    if train.staleness is None and len(kinds) > 1:
        raise ConfigError(
            "parties of feature vectors and of images: give --staleness (0: exact rounds), "
            "which tables and images default differently"
        )
