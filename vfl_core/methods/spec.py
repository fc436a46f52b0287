"""What a training method is, as data: one frozen `MethodSpec` per method
(`vfl_core.methods.registry` holds the registry of them).

Party, engine and predictions never compare method names: they ask the spec
- how heads are fed: the mean of the embeddings of a subset, or a concatenation (all K blocks
  with zeros for the absent ones, or the subset's own slot of each member),
- which representation slots a party computes (one shared f_k, or one per subset),
- which heads exist and where (every label party, the active party, each subset's owner),
- which batches can train, which parties fuse and the loss terms each trains (`tasks`),
- whether label parties' heads also serve sets of feature-only blocks (train on them, also from
  label-only rows, and predict for samples that no label party observes),
- who predicts, with which head and embeddings, and how their answers are combined,
- what stands in for a party that failed in training (nothing, zeros, a stale embedding, or the
  round is skipped), and the method's display name.

A method that does not fit Embed/Fuse/Backward sets `program`: the engine then hands it every
training round and prediction batch (see `RoundProgram`), and the data fields above describe
only what the method's reports need (its name).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from vfl_core.errors import ProtocolError
from vfl_core.methods.combination import Combination as Combination
from vfl_core.methods.steps import StepSpec

# re-exported: the slot key of a party's one f_k / g_k, and the subsets' type
from vfl_core.model.slots import CONCAT_HEAD as CONCAT_HEAD
from vfl_core.model.slots import LINEAR_HEAD as LINEAR_HEAD
from vfl_core.model.slots import SHARED as SHARED
from vfl_core.model.slots import Subset as Subset

if TYPE_CHECKING:  # the engine imports the specs, not the other way round
    from vfl_core.data.batch_plan import Batch
    from vfl_core.methods.federation_port import FederationPort as Federation
    from vfl_core.methods.outcomes import PredictionBatch, RoundRecord


class RunConfig(Protocol):
    """What the methods layer reads of a run's configuration. vfl_core.config.TrainConfig is one:
    the config sits above the methods (it names them and holds their sections), so the methods
    see it through this protocol; a method's `dims` reads its own section of it."""

    @property
    def epochs(self) -> int: ...

    @property
    def seed(self) -> int: ...

    @property
    def method(self) -> str: ...

    def batch_rows(self, rows: int, tabular: bool = False) -> int: ...

    @property
    def eval_batch_size(self) -> int: ...

    def __getattr__(self, section: str) -> Any:
        """A method's own section of the config (`dvfl`, `dlvm`), which only it reads."""
        ...


# mean: g_k(mean of the subset's embeddings); concat: all K blocks side by side, zeros where a
# block is absent; concat_slots: the subset's own slot of each member, side by side.
Fusion = Literal["mean", "concat", "concat_slots"]
Slots = Literal["shared", "per_subset"]  # one f_k, or one per subset that contains the party
# label_parties: every label party holds one head g_k; active_party: only the lowest label
# block holds one; subset_owner: one head per subset, at the subset's lowest label block.
HeadsAt = Literal["label_parties", "active_party", "subset_owner"]
# PredictCall.head naming a label party's concatenating head (MethodSpec.concat_head)
CONCAT = "concat"
LINEAR = "linear"  # ... and its linear head on the towers' lanes (MethodSpec.linear_head)
# ... and the mean of the predictions of all its heads (MethodSpec.blend_members)
BLEND = "blend"
# The heads a label party may train beside its own, by PredictCall name: the models' key and the
# option that trains them (MethodSpec.concat_head, .linear_head)
EXTRA_HEADS: dict[str, tuple[Subset, str]] = {
    CONCAT: (CONCAT_HEAD, "--concat-head"),
    LINEAR: (LINEAR_HEAD, "--linear-lane"),
}
# What stands in for a party that failed during training: nothing (the subset shrinks), zeros,
# the last embedding received for the sample, or nothing trains (the round is skipped).
Replacement = Literal["nothing", "zeros", "stale", "skip"]


@dataclass(frozen=True)
class HeadTask:
    """One loss term at a head party: head `head` fed the embeddings of `subset`, times `weight`."""

    head: Subset
    subset: Subset
    weight: float


@dataclass(frozen=True)
class TaskContext:
    """What a task rule may look at: the head party, the blocks whose embeddings it has, the
    federation's shape, and the party's task RNG of this round (seed, round, block)."""

    block: int
    present: tuple[int, ...]  # sorted
    num_blocks: int
    label_blocks: tuple[int, ...]
    rng: np.random.Generator
    unlabelled: tuple[int, ...] = ()  # blocks known to hold no labels (feature-only parties)


TaskRule = Callable[[TaskContext], list[HeadTask]]


class RoundProgram(Protocol):
    """The round program of a method whose phases are not Embed/Fuse/Backward (e.g. one-way
    activation writes to aggregators, or extra exchange phases). The engine calls it for every
    training batch and every prediction batch, after its own liveness bookkeeping; it drives
    the parties through the engine's transport and returns what the engine would have."""

    def train_round(
        self, fed: Federation, round_id: int, epoch: int, batch: Batch
    ) -> RoundRecord: ...

    def predict_batch(
        self,
        fed: Federation,
        split: str,
        batch: Batch,
        request: int,
        blocks: Collection[int] | None,
    ) -> PredictionBatch: ...


class ProgramHooks:
    """What a round program may also decide, beyond its rounds; a program that inherits this
    class gets the engine's behaviour wherever it keeps these defaults. Per-run state belongs
    in `fed.program_state` (the spec and its program are shared by every run)."""

    def epochs(self, config: RunConfig) -> int:
        """Epochs of a run of `config`: a program may add stages after the configured ones."""
        return config.epochs

    def plan(self, fed: Federation, epoch: int) -> list[Batch] | None:
        """The batches of `epoch` (a pure function of the run and the epoch, so a resumed run
        repeats it); None: the engine's plan (every sample once, single-pattern batches)."""
        return None

    def party_state(self, party: Any) -> Any:
        """What a Party of this method keeps instead of f_k and g_k (vfl_core.training.party); None:
        the models of the spec's slots and heads."""
        return None

    def embed_width(self, fed: Federation) -> int | None:
        """Floats per sample in a party's Embed answer; None: the engine's (slots x embed_dim)."""
        return None

    def rejoined(self, fed: Federation, block: int) -> bool:
        """A party registered again (or came back from an injected failure); True if the
        program updated the liveness itself."""
        return False

    def stats(self, fed: Federation) -> dict[str, object] | None:
        """What results.json reports of the run's program (None: nothing)."""
        return None

    def state(self, fed: Federation) -> dict[str, object]:
        """Plain data for the coordinator's checkpoint (Federation.snapshot)."""
        return {}

    def load_state(self, fed: Federation, saved: dict) -> None:
        """Continue from `state` after a coordinator restart."""


def no_head_tasks(c: TaskContext) -> list[HeadTask]:
    """A method with a round program trains no head on fused embeddings: its program's phases
    carry objectives of their own (DVFL's tiers, DLVM's posterior)."""
    return []


class ProgramRounds(ProgramHooks):
    """The engine's entry into a round program that keeps per-run state: `build` makes the
    run's program object once, into `fed.program_state`, and the hooks below forward to it. A
    method subclasses this with `build` and whatever it decides beyond its rounds (epochs,
    party state, embedding width, rejoins)."""

    def build(self, fed: Federation) -> Any:
        """The run's program object (run_round, predict_batch, plan, stats, state, load_state)."""
        raise NotImplementedError

    def run(self, fed: Federation) -> Any:
        if fed.program_state is None:
            fed.program_state = self.build(fed)
        return fed.program_state

    def train_round(self, fed: Federation, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
        return self.run(fed).run_round(round_id, epoch, batch)

    def predict_batch(
        self,
        fed: Federation,
        split: str,
        batch: Batch,
        request: int,
        blocks: Collection[int] | None,
    ) -> PredictionBatch:
        return self.run(fed).predict_batch(split, batch, request, blocks)

    def plan(self, fed: Federation, epoch: int) -> list[Batch] | None:
        return self.run(fed).plan(epoch)

    def stats(self, fed: Federation) -> dict[str, object] | None:
        return self.run(fed).stats()

    def state(self, fed: Federation) -> dict[str, object]:
        return self.run(fed).state()

    def load_state(self, fed: Federation, saved: dict) -> None:
        self.run(fed).load_state(saved)


@dataclass(frozen=True)
class MethodSpec:
    name: str  # the key of the registry, as --method takes it
    display_name: str  # how reports and the demo name it (the paper's name where it has one)
    fusion: Fusion
    slots: Slots
    heads: HeadsAt
    tasks: TaskRule  # the loss terms a head party trains on a batch
    combination: Combination
    replacement: Replacement
    own_block_only: bool = False  # a head sees its own block only (local predictors)
    needs_all_blocks: bool = False  # trains on and predicts for fully observed sets only
    # ... but at inference the active party predicts for any observed set, zeros in place of
    # the missing blocks' embeddings (the DLVM paper's Vanilla VFL, its App. D.1)
    zero_imputes: bool = False
    # Heads also serve sets of feature-only blocks (vfl_core.methods.laser.objective): a label
    # party trains on them, also for samples it holds only the label of, and predicts for a
    # sample that no label party observes, from the others' embeddings alone.
    serves_feature_only: bool = False
    # The method also learns from training rows whose label is unknown (vfl prepare --labels):
    # a label party keeps them (else it drops them, as if it did not hold those samples).
    unlabelled_rows: bool = False
    program: RoundProgram | None = None
    # What `--fault-entity` may fail (vfl_core.training.faults): a party ("guest") for every
    # method; DVFL adds its hosts and its guest-host links.
    fault_entities: tuple[str, ...] = ("guest",)
    # The method's own steps, called through the generic Step of every transport
    # (vfl_core.methods.steps), and the sizes its schemas name, from the run's config (e.g.
    # {"guest_dim": 8}); a method of Embed/Fuse/Backward has none.
    steps: tuple[StepSpec, ...] = ()
    dims: Callable[[RunConfig], Mapping[str, int]] | None = None
    # Each label party also trains a second head (key CONCAT_HEAD) on the zero-filled
    # concatenation of the blocks a batch has (zerofill's head), on the same f_k, beside its own;
    # the validation choice may predict an observed set with it (TrainConfig.concat_head,
    # vfl_core.inference.choice). Only for LASER-VFL's shape (`has_subset_predictors`).
    concat_head: bool = False
    concat_weight: float = 5.0  # its loss term's weight (TrainConfig.concat_weight)
    # A third head (key LINEAR_HEAD) on the same concatenation: the logistic or ridge regression
    # of the joined columns that the towers' lanes carry (ModelConfig.linear_lane,
    # vfl_core.model.linear_lane); a candidate of the validation choice like the concatenating
    # head's. Its term weighs 1: no other head's gradient reaches the lanes.
    linear_head: bool = False

    def step(self, name: str) -> StepSpec:
        """The method's step `name`; another is a ProtocolError (INVALID_ARGUMENT on the wire)."""
        for step in self.steps:
            if step.name == name:
                return step
        known = ", ".join(s.name for s in self.steps) or "none"
        raise ProtocolError(f"method {self.name} has no step {name[:64]!r} (its steps: {known})")

    def step_dims(self, config: RunConfig) -> Mapping[str, int]:
        return {} if self.dims is None else self.dims(config)

    # ------------------------------------------------------------ models
    @property
    def concatenates(self) -> bool:
        """Whether heads see a concatenation of embeddings (else their mean)."""
        return self.fusion != "mean"

    @property
    def extra_head_names(self) -> tuple[str, ...]:
        """The PredictCall names of a label party's heads beside its own (EXTRA_HEADS)."""
        on = {CONCAT: self.concat_head, LINEAR: self.linear_head}
        return tuple(name for name in EXTRA_HEADS if on[name])

    @property
    def extra_heads(self) -> tuple[Subset, ...]:
        """The keys of a label party's heads beside its own: the concatenating, the linear."""
        return tuple(EXTRA_HEADS[name][0] for name in self.extra_head_names)

    @property
    def blend_members(self) -> tuple[str, ...]:
        """The heads whose predictions BLEND averages ("": the method's own), where a label
        party trains another beside its own; else none."""
        extra = self.extra_head_names
        return ("", *extra) if extra else ()

    @property
    def label_parties_hold_head(self) -> bool:
        """Whether every label party holds one shared head g_k from the start."""
        return self.heads == "label_parties"

    def slot_keys(self, block: int, blocks: Sequence[int]) -> list[Subset]:
        """Representation slots party `block` computes when `blocks` take part in a batch."""
        if self.slots == "per_subset":
            return subsets_with(block, blocks)
        return [SHARED]

    def head_input_blocks(self, head: Subset, num_blocks: int) -> int:
        """How many embeddings of size d a head's input holds."""
        if self.fusion == "concat" or head in (CONCAT_HEAD, LINEAR_HEAD):
            return num_blocks
        if self.fusion == "concat_slots":
            return len(head)
        return 1

    @property
    def has_subset_predictors(self) -> bool:
        """LASER-VFL's shape: shared f_k, a mean (or a zero-filled concatenation) into a head
        per label party that serves every subset containing it, combined as heads (not the
        baselines, not a method with a round program): the shape whose subset predictors the
        validation choice chooses among, beside which a concatenating head may train."""
        return (
            self.program is None
            and self.heads == "label_parties"
            and self.fusion in ("mean", "concat")
            and self.slots == "shared"
            and self.combination == "heads"
            and not self.own_block_only
            and not self.needs_all_blocks
        )

    @property
    def shares_embeddings(self) -> bool:
        """Whether head parties need the other parties' embeddings (local predictors do not)."""
        return not self.own_block_only

    # ------------------------------------------------------------ training
    def trainable(
        self,
        pattern: Sequence[int],
        num_blocks: int,
        label_blocks: Sequence[int],
        label_only: Sequence[int] = (),
    ) -> bool:
        """Whether a batch with this observed set can train anything; `label_only`: the label
        parties that hold the batch's labels but not its features."""
        if self.needs_all_blocks:
            return len(pattern) == num_blocks
        if self.heads == "active_party":
            return active_party(label_blocks) in pattern
        if any(b in label_blocks for b in pattern):
            return True
        return self.serves_feature_only and bool(label_only) and bool(pattern)

    def fuse_parties(
        self,
        present: Sequence[int],
        label_blocks: Sequence[int],
        label_only: Sequence[int] = (),
    ) -> list[int]:
        """Head parties that train on a batch whose embeddings came from `present`; with
        `serves_feature_only`, also the label-only holders if a feature-only block is present
        (they train on its subsets only)."""
        if self.heads == "active_party":
            active = active_party(label_blocks)
            return [active] if active in present else []
        if self.heads == "subset_owner":
            owners = {owner(s, label_blocks) for s in all_subsets(present)}
            return sorted(b for b in owners if b is not None)
        heads = [b for b in present if b in label_blocks]
        if self.serves_feature_only and any(b not in label_blocks for b in present):
            heads += [b for b in label_only if b not in present]
        return heads

    def fuse_tasks(
        self,
        block: int,
        present: Sequence[int],
        num_blocks: int,
        label_blocks: Sequence[int],
        rng: np.random.Generator,
        unlabelled: Sequence[int] = (),
    ) -> list[HeadTask]:
        """The loss terms party `block` trains on a batch with embeddings from `present`;
        `unlabelled`: the blocks known to hold no labels (whose sets the heads serve only with
        `serves_feature_only`)."""
        context = TaskContext(
            block,
            tuple(sorted(present)),
            num_blocks,
            tuple(label_blocks),
            rng,
            tuple(sorted(unlabelled)) if self.serves_feature_only else (),
        )
        tasks = self.tasks(context)
        if self.concat_head and block in context.present:  # zerofill's term, on its own head
            tasks.append(HeadTask(CONCAT_HEAD, context.present, self.concat_weight))
        if self.linear_head and block in context.present:
            tasks.append(HeadTask(LINEAR_HEAD, context.present, 1.0))
        return tasks

    # ------------------------------------------------------------ inference
    def predictors(
        self, present: Sequence[int], num_blocks: int, label_blocks: Sequence[int]
    ) -> list[int] | None:
        """Parties asked to predict for a batch with embeddings from `present`; None means the
        method cannot use this observed set and counts a random prediction (svfl). With
        `serves_feature_only`, every label party predicts for a set without one (the engine
        calls those it can reach)."""
        if self.needs_all_blocks and len(present) != num_blocks:
            return [active_party(label_blocks)] if self.zero_imputes else None
        if self.serves_feature_only and present and not set(present) & set(label_blocks):
            return sorted(label_blocks)
        if self.heads == "active_party":
            active = active_party(label_blocks)
            return [active] if active in present else []
        if self.heads == "subset_owner":
            o = owner(tuple(sorted(present)), label_blocks)
            return [o] if o is not None else []
        return [b for b in sorted(present) if b in label_blocks]

    def predict_subset(
        self, block: int, present: Sequence[int], head: str = ""
    ) -> tuple[Subset, Subset]:
        """(head, subset of embeddings) party `block` predicts with when `present` answered;
        `head` as PredictCall names it ("": the method's own)."""
        present = tuple(sorted(present))
        if head:
            if head in self.extra_head_names:
                return EXTRA_HEADS[head][0], present
            raise ProtocolError(f"method {self.name} has no head {head[:64]!r}")
        if self.own_block_only:
            return SHARED, (block,)
        if self.heads == "subset_owner":
            return present, present
        return SHARED, present


# ---------------------------------------------------------------- subsets and owners


def subsets_with(block: int, blocks: Sequence[int]) -> list[Subset]:
    """Every subset of `blocks` that contains `block`, smallest first, each sorted."""
    others = sorted(b for b in blocks if b != block)
    return [
        tuple(sorted((block, *rest)))
        for size in range(len(others) + 1)
        for rest in combinations(others, size)
    ]


def all_subsets(blocks: Sequence[int]) -> list[Subset]:
    """Every non-empty subset of `blocks`, smallest first, each sorted."""
    blocks = sorted(blocks)
    return [s for size in range(1, len(blocks) + 1) for s in combinations(blocks, size)]


def active_party(label_blocks: Sequence[int]) -> int | None:
    """The party of the split-learning baselines' one head: the lowest label block."""
    return min(label_blocks) if label_blocks else None


def owner(subset: Subset, label_blocks: Sequence[int]) -> int | None:
    """The party that holds the combinatorial head of `subset`: its lowest label block."""
    holders = [b for b in subset if b in label_blocks]
    return min(holders) if holders else None
