"""Typed, frozen configuration models. They live at the edges (CLIs, wire, checkpoints)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic_core import PydanticCustomError

# re-exported, and read here as config's own: the tabular sweep patches them on this module
from vfl_core.early_stop_defaults import AUTO_MIN_VALIDATION as AUTO_MIN_VALIDATION
from vfl_core.early_stop_defaults import AUTO_PATIENCE as AUTO_PATIENCE
from vfl_core.early_stop_defaults import AUTO_SMALL_EPOCHS as AUTO_SMALL_EPOCHS
from vfl_core.early_stop_defaults import AUTO_STALE_MIN_EPOCHS as AUTO_STALE_MIN_EPOCHS
from vfl_core.early_stop_defaults import AUTO_STALE_PATIENCE as AUTO_STALE_PATIENCE
from vfl_core.methods.dlvm.config import DlvmConfig
from vfl_core.methods.dvfl.config import DvflConfig as DvflConfig  # re-exported: TrainConfig.dvfl
from vfl_core.methods.registry import (
    METHODS as METHODS,  # re-exported: the registry's method names
)
from vfl_core.methods.registry import REGISTRY, method_spec, unknown_method
from vfl_core.methods.spec import MethodSpec, ProgramHooks
from vfl_core.model.model_config import ModelConfig as ModelConfig  # re-exported: TrainConfig.model
from vfl_core.model.quantize import WireDtype
from vfl_core.privacy.config import PrivacyConfig


def _known_method(name: str) -> str:
    if name not in REGISTRY:
        raise PydanticCustomError("unknown_method", "{message}", {"message": unknown_method(name)})
    return name


# The thresholds the validation split chooses (vfl_core.inference.choice.THRESHOLD_METRIC).
THRESHOLD_RULES = ("auto", "accuracy", "accuracy-1se", "platt", "f1")
# The most --staleness the direct data plane takes (vfl_core.training.direct_stale: a party's
# mailbox takes pushes up to 8 rounds ahead of its current round, and 2 + 2 * ((S + 1) // 2)
# rounds are in flight)
MAX_DIRECT_STALENESS = 5


def _threshold(value: object) -> object:
    """A rule of THRESHOLD_RULES, or a probability strictly between 0 and 1 (a number or its
    text)."""
    if value in THRESHOLD_RULES:
        return value
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = float("nan")
    if not 0 < number < 1:
        raise PydanticCustomError(
            "threshold",
            "must be auto or a probability strictly between 0 and 1 (or {rules}), not {value}",
            {"value": repr(value), "rules": ", ".join(THRESHOLD_RULES[1:])},
        )
    return number


def _auto_or(kind: type, floor: float) -> object:
    """A validator of 'auto' or a number of `kind` (its text too) above `floor` (int: at least
    it), with one readable message for anything else."""

    def check(value: object) -> object:
        if value == "auto":
            return value
        try:
            number = kind(value)  # type: ignore[call-arg]
            whole = kind is not int or float(value) == number  # type: ignore[arg-type]
        except (TypeError, ValueError):
            number, whole = None, False
        if number is None or not whole or isinstance(value, bool):
            ok = False
        else:
            ok = number >= floor if kind is int else number > floor
        if not ok:
            what = f"a whole number >= {floor:g}" if kind is int else f"a number > {floor:g}"
            raise PydanticCustomError(
                "auto_or_number",
                "must be auto or {what}, not {value}",
                {"what": what, "value": repr(value)},
            )
        return number

    return BeforeValidator(check)


# A binary task's decision threshold: chosen on validation ("auto": choice.AUTO_THRESHOLD's
# rule, Platt scaling; "platt": Platt scaling's; "accuracy": the best accuracy there;
# "accuracy-1se": that only if it beats 0.5 by more than one standard error; "f1": the best F1)
# or P(positive) at or above which the positive class is predicted (vfl_core.inference.choice).
Threshold = Annotated[
    Literal["auto", "accuracy", "accuracy-1se", "platt", "f1"] | float,
    BeforeValidator(_threshold),
]
# What "auto" batch size and learning rate are where the tabular defaults do not apply (images,
# methods with stages): the values every run had before the tabular ones (the digits demo's).
DEFAULT_BATCH = 64
DEFAULT_LR = 1e-3
# Tables: the batch holds about 1 / AUTO_ROUNDS_PER_EPOCH of the training samples, between
# DEFAULT_BATCH (a table of 256 rows or fewer keeps its batch of 64) and AUTO_MAX_BATCH (a
# round's tensors stay about 1 MB a party at 64 float32 a row), so an epoch is about that many
# rounds up to a million rows: every round crosses the network, an epoch's samples do not.
AUTO_ROUNDS_PER_EPOCH = 4
AUTO_MAX_BATCH = 4096
# Tables: the learning rate at epoch 0 (the "decay" schedule then halves it every
# vfl_core.model.lr_schedule.DECAY_HALF_LIFE epochs; neither depends on the epoch ceiling).
AUTO_TABLE_LR = 5e-3
# The linear scaling rule (Goyal et al. 2017, "Accurate, Large Minibatch SGD", s. 2.1) for a
# table's "auto" rate: DEFAULT_LR at DEFAULT_BATCH, scaled with the batch the party's own
# training rows give (`table_batch`), up to AUTO_TABLE_LR. Tried, not kept: off; on while True
# (docs/tabular-defaults.md, "Time to a model": diabetes better, breast cancer and wine not).
SCALED_TABLE_LR = False
# A method is a name in the registry of method specs (vfl_core.methods.registry); others are
# refused.
Method = Annotated[str, AfterValidator(_known_method)]


def table_batch(rows: int) -> int:
    """The "auto" batch of a table of `rows` training samples: rows / AUTO_ROUNDS_PER_EPOCH
    rounded up, within DEFAULT_BATCH and AUTO_MAX_BATCH."""
    return min(AUTO_MAX_BATCH, max(DEFAULT_BATCH, -(-rows // AUTO_ROUNDS_PER_EPOCH)))


def scaled_table_lr(rows: int) -> float:
    """The linear scaling rule (Goyal et al. 2017, s. 2.1): DEFAULT_LR x batch / DEFAULT_BATCH
    for the batch `table_batch(rows)`, at least DEFAULT_LR and at most AUTO_TABLE_LR (5x)."""
    factor = min(AUTO_TABLE_LR / DEFAULT_LR, table_batch(rows) / DEFAULT_BATCH)
    return DEFAULT_LR * max(1.0, factor)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TrainConfig(_Frozen):
    """Everything that fixes a training run. One seed fixes plans, task samples and weights."""

    method: Method = "laser"
    seed: int = 0
    epochs: int = Field(60, ge=0)
    # Samples per training round; "auto": `batch_rows()`, from the training-row count on tables
    # (AUTO_ROUNDS_PER_EPOCH), DEFAULT_BATCH otherwise. Resolved by the coordinator where the
    # batch plan is built, from the aligned training rows every side agrees on.
    batch_size: Annotated[int | Literal["auto"], _auto_or(int, 1)] = "auto"
    eval_batch_size: int = Field(512, ge=1)
    # "auto": `learning_rate()`, AUTO_TABLE_LR for a party of tabular features, DEFAULT_LR for
    # images and methods with stages (each party resolves its own, as its head: it knows its
    # features' shape).
    lr: Annotated[float | Literal["auto"], _auto_or(float, 0)] = "auto"
    weight_decay: float = Field(1e-4, ge=0)
    # The L2 penalty of the linear model (ModelConfig.linear_lane: the towers' lanes and the
    # linear heads) in place of `weight_decay`: the penalty of the logistic or ridge regression
    # it is (docs/tabular-defaults.md, "The linear model's own penalty").
    lane_weight_decay: float = Field(0.03, ge=0)
    # How a training round's rows weigh in its loss. "rows": every row the same, over the
    # epoch: the round's loss is the sum over its rows over the plan's batch size, so a short
    # batch (the plan cuts single-pattern batches: each pattern's last, a small pattern's only
    # one) counts its rows, as the empirical risk does, not a whole batch's.
    # "mean": the mean over the round's rows, whatever their number (the runs before, bit for
    # bit). "auto" (vfl_core.auto_rounds.resolve): "rows" on tables, "mean" on images and for
    # the methods with stages. docs/tabular-defaults.md, "Every training row weighs the same".
    round_loss: Literal["auto", "rows", "mean"] = "auto"
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float = Field(0.9, ge=0, lt=1)
    # How torch updates the weights: "fused", one kernel for all of an optimiser's weights
    # (torch's fused=True, on CPU and CUDA); "loop", torch's Python loop over them, the runs of
    # before bit for bit. The same rule; the floats differ in their last bits, and a table's
    # rounds cost less (docs/tabular-defaults.md, "The optimiser's fused kernel").
    optimizer_kernel: Literal["fused", "loop"] = "fused"
    # The learning rate by epoch: "none" constant, "cosine" from lr down to 0 at `epochs` (the
    # ceiling, also under early stopping), "decay" halved every DECAY_HALF_LIFE epochs
    # (vfl_core.model.lr_schedule: no ceiling in it). "auto": `schedule()`, decay for tabular
    # parties, constant for images and staged methods (docs/tabular-defaults.md, measured).
    scheduler: Literal["auto", "none", "cosine", "decay"] = "auto"
    # "resample": class-balanced resampling of each epoch's plan (the paper's Credit setup).
    # The label party then tells the coordinator each training sample's class weight.
    balance: Literal["none", "resample"] = "none"
    # LASER-VFL heads also serve the sets of feature-only parties (vfl_core.methods.laser): they
    # train on their subsets and predict for samples no label party observes. False: the paper's
    # objective exactly. No effect when every party holds labels, or for the baselines.
    serve_feature_only: bool = True
    # Classification heads' cross-entropy with this share of each target spread over the classes
    # (0: the plain loss; docs/tabular-defaults.md has what 0.1 measured).
    label_smoothing: float = Field(0.0, ge=0, lt=1)
    # Evaluation on averaged weights (vfl_core.model.weight_average): "ema", each party keeps an
    # exponential moving average of its own towers and heads, updated after each of their
    # optimiser steps with `ema_decay` (per step: a round steps each module about once), and
    # evaluates with it (validation, the validation's choices, test, predict, serving); training
    # steps the live weights. Nothing crosses the wire. "none": the live weights throughout.
    weight_average: Literal["none", "ema"] = "none"
    ema_decay: float = Field(0.97, ge=0, lt=1)
    model: ModelConfig = ModelConfig()
    # How embeddings and gradients travel (vfl_core.model.quantize): float32 is lossless; float16,
    # bfloat16 and int8 (one scale per row) round what crosses the wire, in both transports.
    wire_dtype: WireDtype = "float32"
    # Pipelined rounds (vfl_core.training.pipeline). 0: exact, bit-identical to the sequential
    # engine (one
    # round at a time; a round's Backward travels with the next round's Embed). S >= 1 changes
    # the math: (S + 1) // 2 rounds per call and two calls in flight per party, so an embedding
    # may miss up to S earlier rounds of its party's updates (bounded staleness). None (the
    # default): vfl_core.auto_rounds.resolve() gives AUTO_STALENESS on tabular parties unless the
    # run needs exact rounds (docs/tabular-defaults.md, "Rounds over a network"), 0 on images.
    staleness: int | None = Field(None, ge=0, le=63)
    # Early stopping's epoch end off the critical path (vfl_core.training.late_validation): epoch
    # e's validation is scored while epoch e + 1 trains, the verdict taken an epoch late (up to
    # one epoch more trained; the best epoch's weights still kept exactly). False: the verdict at
    # each epoch's end, before the next epoch starts. None (the default): on where
    # vfl_core.auto_rounds.resolve() gives the tables' staleness, else off.
    overlap_validation: bool | None = None
    # With --staleness and --overlap-validation: the blocks of rounds run on across an epoch's
    # end (vfl_core.training.pipeline, direct_stale): the next epoch's first block is embedded
    # before the epoch's last block is stepped (it misses that block's updates, within the
    # staleness bound), and each party's validation is taken at its own epoch's end. Changes
    # the math; False: every epoch's end drains the pipeline. None (the default): with the
    # tables' staleness where vfl_core.auto_rounds.AUTO_EPOCH_FLOW says so, else off.
    epoch_flow: bool | None = None
    # With --staleness: the label party's own tower exact (docs/tabular-defaults.md, "Rounds over
    # a network"): it embeds its own rows at each round's Fuse with its current weights and steps
    # them there, so only the feature parties' embeddings are stale; its Embed answer is zeros
    # of the embedding's shape (the same bytes; no other party reads it). One label party only
    # (another head would need its embedding); no effect with exact rounds. Changes the math.
    # None (the default): on with the tables' staleness and one label party, else off
    # (vfl_core.auto_rounds.own_tower: the federation resolves it, as it knows the label parties).
    fresh_own_tower: bool | None = None
    # Local updates on cached tensors (vfl_core.methods.laser.local_steps; CELU-VFL, FedBCD).
    # 0: none, every update needs a round trip (the paper's Algorithm 1). R >= 1 changes the
    # math: after its exact update of a round, every party takes R more steps on that round's
    # batch alone: a party re-runs f_k and applies the gradient it received, each row weighted
    # by the cosine between its fresh and its sent embedding (0 below 0); a label party also
    # re-trains its heads on the others' embeddings it received and its own fresh one, tasks
    # sampled per local step. Compute per round rises about (R + 1)-fold; docs/local-updates.md.
    local_steps: int = Field(0, ge=0, le=64)
    # Early stopping (vfl_core.training.early_stop). 0: off (every epoch runs; nothing is held out).
    # N >= 1: `validation_fraction` of the aligned training samples, drawn from the seed, are left
    # out of the plan and scored by the label parties after every epoch; training stops after N
    # epochs without a better validation accuracy (regression: RMSE), and every party goes back
    # to its weights of the best epoch; `epochs` is the ceiling. None (the default): on with
    # AUTO_PATIENCE for tabular parties (feature vectors: a user's own tables) whose validation
    # share holds AUTO_MIN_VALIDATION samples or more, off for images (the digits demo and the
    # image benchmarks keep the paper's plain run): `patience()`. Where a table's share holds
    # fewer, nothing is held out and the run ends after AUTO_SMALL_EPOCHS epochs (at most
    # `epochs`: vfl_core.training.train_rows).
    early_stop_patience: int | None = Field(None, ge=0)
    # An epoch resets the patience only if its validation metric beats the one that last reset
    # it by this share of that value (0.01: 1 %; smaller gains still update the best epoch whose
    # weights are restored, but do not extend training). 0: any gain resets it.
    early_stop_min_improvement: float = Field(0.01, ge=0, lt=1)
    # No early stop before this many epochs (None: AUTO_STALE_MIN_EPOCHS or 0, `min_epochs()`)
    early_stop_min_epochs: int | None = Field(None, ge=0)
    validation_fraction: float = Field(0.1, gt=0, lt=1)
    # The heads a run predicts with where nothing is held out to choose on (a table too small
    # for a validation split, or early stopping off): "laser", LASER-VFL's; "blend", the mean
    # of the label party's heads (with the concatenating or linear heads); "auto", the blend for
    # a regression and LASER-VFL's for classes (vfl_core.inference.unvalidated).
    unvalidated_heads: Literal["auto", "laser", "blend"] = "auto"
    # What the validation split chooses after training (vfl_core.inference.choice); both need
    # one (early stopping on) and read only its rows. `threshold`: a binary task's decision
    # threshold on the positive-class probability, "auto" ("platt": Platt scaling fitted on
    # validation, docs/tabular-defaults.md), "accuracy" (the best accuracy there: what a table
    # is judged by), "accuracy-1se" (that, if better than 0.5 by more than one standard error),
    # "f1" (the best F1 there) or a number (0.5: the plain argmax). `subset_choice`:
    # "validation" predicts each observed set from the subset of its parties that scores best
    # on validation by more than its standard error (else the full set: the one-standard-error
    # rule); "best" from the strictly best one there (the full set on ties); "plain" from the
    # full set, as the paper does.
    threshold: Threshold = "auto"
    subset_choice: Literal["validation", "best", "plain"] = "validation"
    # LASER-VFL: each label party also trains a head on the zero-filled concatenation of the
    # blocks a batch has (zerofill's), on the same f_k, and the validation choice predicts an
    # observed set with it where it beats the LASER heads by more than its standard error
    # (vfl_core.inference.choice; docs/tabular-defaults.md has what it measured). None (the
    # default): on for tabular parties (feature vectors), off for images, so the paper's
    # benchmarks and the digits demo keep LASER-VFL's heads alone: `spec_for()`.
    concat_head: bool | None = None
    # How the validation chooses the concatenating head: "sets", per observed set (a set with
    # fewer than MIN_CHOICE_SAMPLES validation samples keeps LASER-VFL's heads); "all" (the
    # default), once for every set holding a label party, on all their validation samples
    # together (docs/tabular-defaults.md, "The concatenating head by default on tables").
    concat_choice: Literal["sets", "all"] = "all"
    # The weight of the concatenating head's loss term on a batch, beside LASER-VFL's terms
    # (whose weights a_i, b_i sum to 4.8 for a label party among three parties): the larger, the
    # more the shared towers serve the concatenation (vfl_core.methods.spec.fuse_tasks). 5: about
    # the weight of LASER-VFL's terms together (docs/tabular-defaults.md has what it measured).
    concat_weight: float = Field(5.0, gt=0, le=100)
    # How the validation samples are drawn: "random" (the seed's draw of the samples a label
    # party holds) or "stratified" (classification: each class held out in its share, from
    # per-row draws the label party makes within each class, vfl_core.training.strata;
    # regression falls back to random).
    validation_split: Literal["random", "stratified"] = "random"
    # Regression: what the label party's heads learn. "none": the standardised target; "log":
    # the standardised log(1 + y), predictions back in original units; "auto": log where the
    # party's training targets are non-negative and skewed (vfl_core.data.learning_task.wants_log).
    target_transform: Literal["none", "log", "auto"] = "none"

    def patience(self, tabular: bool) -> int:
        """The early-stopping patience this run uses: the configured one, or by default
        AUTO_PATIENCE on tabular data and 0 (off) on images or for a method with stages."""
        if self.early_stop_patience is not None:
            return self.early_stop_patience
        if not tabular or self.spec.program is not None:
            return 0
        return AUTO_STALE_PATIENCE if self.staleness else AUTO_PATIENCE

    def min_epochs(self) -> int:
        """The epochs before early stopping may end a run: the configured ones, or
        AUTO_STALE_MIN_EPOCHS with bounded staleness and the default patience."""
        if self.early_stop_min_epochs is not None:
            return self.early_stop_min_epochs
        return AUTO_STALE_MIN_EPOCHS if self.staleness and self.early_stop_patience is None else 0

    def schedule(self, tabular: bool) -> str:
        """The learning-rate schedule a party of tabular features (or not) follows: the
        configured one, or by default "decay" on tabular data and "none" on images or for a
        method with stages (they step their own optimisers at the configured rate)."""
        if self.scheduler != "auto":
            return self.scheduler
        return "decay" if self._table_defaults(tabular) else "none"

    def learning_rate(self, tabular: bool, rows: int | None = None) -> float:
        """The learning rate at epoch 0: the configured one, or by default AUTO_TABLE_LR on
        tabular data and DEFAULT_LR on images or for a method with stages. With SCALED_TABLE_LR
        a table's rate follows its batch (`scaled_table_lr`) from the party's own training
        `rows`: what it knows in both transports when its optimiser is built."""
        if self.lr != "auto":
            return self.lr
        if not self._table_defaults(tabular):
            return DEFAULT_LR
        return AUTO_TABLE_LR if rows is None or not SCALED_TABLE_LR else scaled_table_lr(rows)

    def batch_rows(self, rows: int, tabular: bool = False) -> int:
        """Samples per training round for a plan of `rows` training samples: the configured
        size, or by default rows / AUTO_ROUNDS_PER_EPOCH (rounded up, within DEFAULT_BATCH and
        AUTO_MAX_BATCH) on tabular data and DEFAULT_BATCH on images or for a method with
        stages. A pure function of what every side knows, so both transports cut the same
        plan."""
        if self.batch_size != "auto":
            return self.batch_size
        if not self._table_defaults(tabular):
            return DEFAULT_BATCH
        return table_batch(rows)

    def plane(self, tabular: bool) -> str:
        """The data plane asked for: the configured one, or by default "auto" (direct where the
        parties reach each other, vfl_coordinator.plane_choice) on tabular data and "relay" on
        images or for a method with stages (docs/data-plane.md)."""
        if self.data_plane is not None:
            return self.data_plane
        return "auto" if self._table_defaults(tabular) else "relay"

    def _table_defaults(self, tabular: bool) -> bool:
        """Whether the tabular defaults apply: tabular features, and a method without stages."""
        return tabular and self.spec.program is None

    @property
    def rounds_per_call(self) -> int:
        """Rounds whose phases one pipelined call carries: 1 when exact."""
        return max(1, ((self.staleness or 0) + 1) // 2)

    @property
    def rounds_kept(self) -> int:
        """Embedded rounds a party keeps for their Fuse and Backward: the one in progress when
        exact; with staleness, the blocks of the two calls in flight and the newest."""
        return 1 if not self.staleness else 3 * self.rounds_per_call

    dvfl: DvflConfig = DvflConfig()  # used by method "dvfl" only
    dlvm: DlvmConfig = DlvmConfig()  # used by method "dlvm" only
    # Label-leak defences, each applied by the party it protects; all off by default (the
    # paper's protocol). vfl_core.privacy, benchmarks/results/privacy.md.
    privacy: PrivacyConfig = PrivacyConfig()
    # Embeddings and gradients travel encrypted end to end between the parties that produce and
    # consume them (vfl_wire.relay_crypto): the coordinator relays sealed boxes and forwards the
    # heads' gradients unsummed. gRPC with TLS certificates only; no effect in process (nobody
    # relays there). docs/security.md.
    encrypt_relay: bool = False
    # Where a training round's embeddings and gradients travel (docs/data-plane.md): "relay"
    # through the coordinator (Embed/Fuse/Backward or pipelined Train calls), "direct" between
    # the parties that produce and consume them over mutual TLS, the coordinator sending each
    # party one Round call and reading only status (gRPC only; in process, nobody relays);
    # "auto": direct where every party reaches the peers it pushes to and the run needs nothing
    # only the relay carries, else relay (vfl_coordinator.plane_choice). None (the default):
    # `plane()`, "auto" on tabular parties, "relay" on images and for methods with stages.
    data_plane: Literal["auto", "relay", "direct"] | None = None

    @model_validator(mode="after")
    def _constant_lr_for_programs(self) -> TrainConfig:
        # Round programs (dvfl) step their own optimisers at the configured rate.
        if self.spec.program is not None and self.scheduler in ("cosine", "decay"):
            raise ValueError(f"method {self.method} trains with constant learning rates")
        # Their stages (dvfl's owner epochs, dlvm's classifier stage) end where they end: the
        # validation watch restores per-epoch weights of the Embed/Fuse/Backward engine only.
        if self.spec.program is not None and self.early_stop_patience:
            raise ValueError(f"method {self.method} has no early stopping (its stages are fixed)")
        for flag, on in (
            ("--concat-head", self.concat_head),
            ("--linear-lane", self.model.linear_lane),
        ):
            if on and not method_spec(self.method).has_subset_predictors:
                raise ValueError(
                    f"{flag} needs LASER-VFL's shape (a head per label party serving every "
                    f"subset); method {self.method} has none: drop {flag}"
                )
        if self.local_steps and self.spec.program is not None:
            raise ValueError(
                f"method {self.method} runs steps of its own: local steps (--local-steps) are "
                "for LASER-VFL and its baselines"
            )
        if self.local_steps and self.staleness:
            raise ValueError(
                "local steps reuse the round's own tensors and need exact rounds: use "
                "--local-steps or --staleness, not both"
            )
        if self.spec.program is not None and self.encrypt_relay:
            raise ValueError(
                f"method {self.method} runs steps of its own, which the encrypted relay does not "
                "cover yet (it seals Embed, Fuse, Backward and Predict): drop --encrypt-relay"
            )
        if self.data_plane == "direct" and self.spec.program is not None:
            raise ValueError(
                f"method {self.method} runs steps of its own, which the direct data plane does "
                "not carry (it carries Embed, Fuse and Backward): drop --data-plane direct"
            )
        if self.epoch_flow and (self.staleness == 0 or self.overlap_validation is False):
            raise ValueError(
                "--epoch-flow runs the blocks of --staleness on across an epoch's end, with the "
                "verdict of --overlap-validation: give both"
            )
        if self.weight_average != "none" and self.spec.program is not None:
            raise ValueError(f"method {self.method} trains models of its own: no --weight-average")
        if self.fresh_own_tower and self.spec.program is not None:
            raise ValueError(f"method {self.method} has no own tower to keep fresh")
        if self.data_plane == "direct" and (self.staleness or 0) > MAX_DIRECT_STALENESS:
            raise ValueError(
                f"the direct data plane takes --staleness up to {MAX_DIRECT_STALENESS} "
                f"(got {self.staleness}): use a smaller one or --data-plane relay"
            )
        return self

    @property
    def total_epochs(self) -> int:
        """Epochs of the whole run: a method's round program may add stages (dvfl's owner)."""
        program = self.spec.program
        return program.epochs(self) if isinstance(program, ProgramHooks) else self.epochs

    @property
    def spec(self) -> MethodSpec:
        """The method's spec as this config runs it, the tabular defaults left out (a
        concatenating head only where `concat_head` is set): `spec_for()` is what Party, its
        models and the engine ask."""
        return self.spec_for(tabular=False)

    def spec_for(self, tabular: bool) -> MethodSpec:
        """The method's spec as this config runs it on tabular parties (feature vectors) or
        not: `concat_head` None trains the concatenating head on tables only."""
        spec = method_spec(self.method)
        if spec.serves_feature_only and not self.serve_feature_only:
            spec = replace(spec, serves_feature_only=False)
        if self.wants_concat_head(tabular) and spec.has_subset_predictors:
            spec = replace(spec, concat_head=True, concat_weight=self.concat_weight)
        if self.model.linear_lane and spec.has_subset_predictors:
            spec = replace(spec, linear_head=True)
        return spec

    def wants_concat_head(self, tabular: bool) -> bool:
        """Whether the label parties train the concatenating head: as configured, or by
        default on tables for a method of LASER-VFL's shape (docs/tabular-defaults.md)."""
        if self.concat_head is not None:
            return self.concat_head
        return self._table_defaults(tabular) and method_spec(self.method).has_subset_predictors
