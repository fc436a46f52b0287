"""The messages of the algorithm, independent of any transport.

The round engine talks to parties only through these types and the `Transport` interface; the
in-process transport passes them as they are and the gRPC transport converts them to protobuf.
Parties are keyed by their block index (distinct blocks are enforced at registration).
Arrays are CPU numpy arrays: float32 for embeddings, gradients and probabilities, int64 for rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

SPLITS = ("train", "test")  # the sample splits a party holds and a round or a step names

# 2: int8 scales are one exponent byte per row; row indices may travel as int32.
PROTOCOL_VERSION = 2

# What the coordinator tells every party (Shutdown) when training ended as planned; a party
# writes its serving bundle only then (vfl_client.runner)
RUN_FINISHED = "run finished"


@dataclass(frozen=True)
class ServingChoice:
    """How the federation decides, for a label party's serving bundle (told with RUN_FINISHED):
    a binary task's decision threshold (None: the argmax) and the subset of parties each observed
    set is predicted from (vfl_core.inference.choice.ValidationChoice; a set not named: all of
    its parties)."""

    threshold: float | None = None
    subsets: Mapping[tuple[int, ...], tuple[int, ...]] = field(default_factory=dict)
    # the observed sets predicted with another of the label party's heads (PredictCall.head:
    # "concat", "linear" or "blend", vfl_core.methods.spec), from all their parties
    heads: Mapping[tuple[int, ...], str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartyInfo:
    """What a party says about itself when it joins (never features, IDs or labels)."""

    party_id: str
    block: int
    num_blocks: int
    dataset: str
    feature_shape: tuple[int, ...]
    num_classes: int  # 1 for regression
    has_labels: bool
    samples: dict[str, int] = field(default_factory=dict)  # rows per split
    protocol_version: int = PROTOCOL_VERSION
    task: str = "classification"  # or "regression" (vfl_core.data.learning_task)
    # split -> how many of its rows, the last ones, are label-only: the party holds their labels
    # but not their features (vfl_core.data.party_dir.PartySplit); absent means none
    label_only: dict[str, int] = field(default_factory=dict)


# What every party of one federation has in common, in the order a disagreement is reported
# (fields of both PartyInfo and vfl_core.data.PartyMeta).
FEDERATION_FIELDS = ("dataset", "num_blocks", "task", "num_classes")
P = TypeVar("P")


def disagreement(parties: Sequence[P]) -> tuple[str, P, P] | None:
    """Whether the parties agree on the federation: None, else the first field of
    FEDERATION_FIELDS on which one differs from the first party, the first party and that one.
    The one check behind the registry's, the engine's and the simulation's refusals."""
    first = parties[0]
    for name in FEDERATION_FIELDS:
        for other in parties[1:]:
            if getattr(other, name) != getattr(first, name):
                return name, first, other
    return None


def mismatch_hint(name: str, a: PartyInfo, b: PartyInfo) -> str:
    """What to do when parties `a` and `b` disagree on field `name`, where we know; else ""."""
    if name == "task":
        return (
            " (every party declares the federation's task, feature-only ones too: a CSV/Parquet "
            "party with --task, a party directory in its meta.json)"
        )
    if name == "num_classes" and not (a.has_labels and b.has_labels):
        without = a if not a.has_labels else b
        return (
            f" (a party without labels does not see the classes: start {without.party_id} "
            "with vfl-client --num-classes N, N being the label party's count)"
        )
    return ""


_FLOAT32 = np.dtype(np.float32)


@dataclass(frozen=True)
class Sealed:
    """An embedding or gradient encrypted end to end between the party that produced it and
    the parties that consume it (TrainConfig.encrypt_relay; the gRPC transport only, sealed and
    opened in vfl_wire.relay_crypto). The round engine relays it without reading it: its shape
    and dtype are in the clear for the size checks, its values are one sealed box per consumer
    block; the consumer checks them (finite, the shape) once it has opened its box."""

    shape: tuple[int, ...]
    boxes: dict[int, bytes]  # consumer block -> box

    @property
    def dtype(self) -> np.dtype:
        return _FLOAT32  # what the boxes hold once opened


@dataclass(frozen=True)
class EmbedCall:
    """Compute E_k = f_k(x_k) on the given rows of a split. `train` keeps the graph for backward."""

    round_id: int
    split: str
    rows: np.ndarray  # (B,) int64, the party's own row indices
    digest: bytes  # sha256 over the keyed ID hashes of the batch, in order
    train: bool
    blocks: tuple[int, ...] = ()  # the blocks asked to embed this batch (baselines' slot layout)
    # True (a training round's call to the one label party, TrainConfig.fresh_own_tower as the
    # federation resolved it): the party embeds the rows at the round's Fuse with its current
    # tower and answers no rows here, shape (0, width) (vfl_core.methods.laser.party_steps)
    fresh_own: bool = False
    # A training round's call to every party: TrainConfig.fresh_own_tower as the federation
    # resolved it, which the party records in its copy of the config
    # (vfl_core.methods.laser.fresh_own.record); None: not said (an evaluation's call)
    own_tower: bool | None = None


@dataclass(frozen=True)
class FuseCall:
    """Train head g_k on the round's embeddings; `embeddings` holds the *other* participants'."""

    round_id: int
    epoch: int
    embeddings: dict[int, np.ndarray]  # block -> (B, slots * d)
    blocks: tuple[int, ...] = ()  # the blocks asked to embed this batch
    label_blocks: tuple[int, ...] = ()  # the federation's label parties (baselines' head owners)
    # Set only for a party that holds the batch's labels but not its features (its label-only
    # rows, of the train split): it embedded nothing, so it learns the batch here.
    rows: np.ndarray | None = None  # (B,) int64
    digest: bytes = b""
    # The plan's batch size (TrainConfig.batch_rows): with TrainConfig.round_loss "rows" the
    # party weighs the round's loss by its rows over it, so that a short batch (a pattern's last,
    # a small pattern's only one) counts its rows, not a whole batch. 0: not sent (the mean).
    batch: int = 0


@dataclass(frozen=True)
class FuseResult:
    loss: float  # the party's sampled LASER loss L_k on this batch
    grads: dict[int, np.ndarray]  # block -> dL_k/dE_block, (B, d), for every other participant


@dataclass(frozen=True)
class BackwardCall:
    """Sum over the other heads of dL_k/dE_i; the party adds its own and steps f_i."""

    round_id: int
    epoch: int
    grad: np.ndarray | None  # (B, d), None when no other head sent a gradient
    # Encrypted relay: the heads' gradients in head order instead of `grad` (the coordinator
    # cannot add them): sealed as the engine relays them, opened (B, d) arrays once they reach
    # the party, which adds them itself (vfl_core.methods.gradient_sum.received_gradient)
    parts: tuple[np.ndarray | Sealed, ...] = ()


@dataclass(frozen=True)
class TrainCall:
    """Phases of one or more training rounds for one party, in one message
    (vfl_core.training.pipeline):
    the party applies every `backward`, then every `fuse`, then every `embed`, each in round
    order, and stops at the first it refuses."""

    backward: tuple[BackwardCall, ...] = ()
    fuse: tuple[FuseCall, ...] = ()
    embed: tuple[EmbedCall, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.backward or self.fuse or self.embed)


@dataclass(frozen=True)
class TrainResult:
    """What ran of a TrainCall: rounds stepped, fused and embedded, and why it stopped early."""

    stepped: tuple[int, ...] = ()
    fused: dict[int, FuseResult] = field(default_factory=dict)  # round -> the head's answer
    embeddings: dict[int, np.ndarray] = field(default_factory=dict)  # round -> (B, slots * d)
    stopped: str = ""


@dataclass(frozen=True)
class Step:
    """An earlier round's Backward that a direct RoundCall applies (TrainConfig.staleness): its
    round and the head blocks whose gradients for the party's embedding of it are awaited."""

    round_id: int
    grads_from: tuple[int, ...] = ()
    # the round's epoch (its learning rate), where it is not the call's: a step of epoch e
    # carried by a call of epoch e + 1 (--epoch-flow); None: the call's epoch
    epoch: int | None = None


@dataclass(frozen=True)
class RoundCall:
    """One party's part of a training round on the direct data plane
    (vfl_core.training.direct_party): the coordinator sends it and nothing else; the party
    embeds, sends its embedding to the heads in `send_to`, fuses on the embeddings of `expect`
    (a head), sends each its gradient, and steps f_k on the gradients of `grads_from`. The
    calls of one round, built from the plan as the relay's are, carry no tensor."""

    round_id: int
    epoch: int
    embed: EmbedCall | None = None  # the party's embedding of the batch (train=True)
    send_to: tuple[int, ...] = ()  # head blocks its embedding goes to
    fuse: FuseCall | None = None  # the head's Fuse, its `embeddings` empty (they come direct)
    expect: tuple[int, ...] = ()  # blocks whose embeddings the Fuse trains on
    grads_from: tuple[int, ...] = ()  # head blocks whose gradient for its embedding it awaits
    holders: tuple[int, ...] = ()  # the round's live label-only holders (the heads' check)
    after: int = -1  # the round this party was sent before this one (-1: none): it runs first
    # Seconds the party waits for a peer's embedding and for a head's gradient (the transport
    # sets them from its deadlines; a peer that misses them is left out, as in the relay)
    embed_wait_s: float = 0.0
    grad_wait_s: float = 0.0
    # set: a validation on the direct plane instead of a training round (no embed, no fuse;
    # vfl_core.training.direct_eval): `send_to` is the scorer, `expect` the scorer's senders
    evaluation: Evaluation | None = None
    # True: only a probe (data_plane "auto"): the party connects to every block of `send_to`
    # within `embed_wait_s` and reports those it reached (RoundResult.reached)
    probe: bool = False
    # Bounded staleness (TrainConfig.staleness, vfl_core.training.direct_stale): the Backward of
    # earlier rounds the party applies, in order, before its embed (`steps_before`) and after
    # its fuse (`steps_after`, the drain at the end of the rounds); `defer_step`: this round's
    # own Backward is left to a later call's steps
    steps_before: tuple[Step, ...] = ()
    steps_after: tuple[Step, ...] = ()
    defer_step: bool = False
    # --overlap-validation: `after` names the validation call sent after round `after` (not the
    # round): this call runs once the party has taken that validation
    after_validation: bool = False
    # --epoch-flow (vfl_core.training.direct_stale): a head holds a copy of its heads before
    # this call's fuse, the heads as at the end of the epoch before, which that epoch's
    # validation (sent after this call) predicts with (Party.hold_heads)
    hold_heads: bool = False


@dataclass(frozen=True)
class EvalBatch:
    """One batch of a direct-plane validation: the party's Embed of it (train=False) and the
    batch's first sample (key index), which keys its random draws (vfl_core.inference.blind)."""

    embed: EmbedCall
    first: int
    head: str = ""  # the scorer's heads that predict it (PredictCall.head): "" the method's own
    # the scorer is not called for it (no label party among its parties): embedded, not pushed,
    # as the relay's Embed call (its batch is unscored there too)
    embed_only: bool = False


@dataclass(frozen=True)
class Evaluation:
    """A validation on the direct data plane: every party embeds its batches and pushes them to
    `scorer` (the label party), which predicts, combines and scores each batch as the
    coordinator and the label party would through the relay; only aggregates come back."""

    split: str
    scorer: int
    batches: tuple[EvalBatch, ...]
    threshold: float | None = None  # binary: the decision threshold; None: the argmax
    # --overlap-validation (vfl_core.training.late_validation): before embedding, the party
    # keeps the copy it held of round `keep` (None: nothing to keep; early stopping's best
    # epoch), then, with `hold`, holds a copy of its state now (the rounds that follow change
    # it before the validation's verdict is back)
    hold: bool = False
    keep: int | None = None
    # binary: the federation's positive-class scores too (ScoreResult: a threshold's choice)
    federation_scores: bool = False


@dataclass(frozen=True)
class EvalAnswer:
    """A party's answer for one batch of an Evaluation: the blocks the prediction used (a
    feature party: itself, if it embedded) and the scorer's aggregates (None: not scored)."""

    request_id: int
    present: tuple[int, ...] = ()
    score: ScoreResult | None = None


@dataclass(frozen=True)
class RoundResult:
    """What a party reports of its RoundCall: status and its head's loss, never a tensor."""

    round_id: int
    embedded: bool = False  # its embedding was computed and sent
    used: tuple[int, ...] = ()  # blocks whose embeddings its Fuse trained on (a head)
    loss: float | None = None  # its head's sampled loss L_k; None: it did not fuse
    stepped: bool = False  # it applied the round's Backward
    evaluated: tuple[EvalAnswer, ...] = ()  # a validation's answers (RoundCall.evaluation)
    reached: tuple[int, ...] = ()  # a probe's answer: the peers it connected to
    steps: tuple[int, ...] = ()  # the earlier rounds whose Backward this call applied


@dataclass(frozen=True)
class PredictCall:
    """Predict h_{k,O} from the embeddings of the observed set O (which includes the party, or
    for LASER-VFL holds no label party at all: then the party's head serves the others)."""

    request_id: int
    embeddings: dict[int, np.ndarray]  # block -> (B, slots * d)
    blocks: tuple[int, ...] = ()  # the blocks asked to embed this batch
    label_blocks: tuple[int, ...] = ()  # the federation's label parties
    # Encrypted relay, an evaluation: the label parties the probabilities are sealed for (they
    # combine and score them, ScoreCall.blind); the in-process transport passes them as they are
    seal_for: tuple[int, ...] = ()
    # Which of the party's heads predicts: "" its method's own, one the method's spec names
    # (EXTRA_HEADS: "concat", "linear"), or "blend", the mean of the predictions of all of them
    # (MethodSpec.blend_members), as the validation chose
    head: str = ""


@dataclass(frozen=True)
class PsiCall:
    """One PSI step for a party (vfl_core.training.psi): points to apply its secret to, or the final
    values of its own rows."""

    split: str
    session: str
    points: list[bytes]  # 32 bytes each


@dataclass(frozen=True)
class ScoreCall:
    """Score named predictions against the party's own labels; only aggregates leave it."""

    split: str
    rows: np.ndarray
    digest: bytes
    predictions: dict[str, np.ndarray]  # name -> (B,) int64 predicted classes (classification)
    # name -> (B,) float32: the positive-class probability (binary classification, for ROC AUC)
    # or the predicted value in original units (regression, where `predictions` is empty)
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    # Encrypted relay: instead of `predictions` and `scores`, the predictions of the batches
    # whose rows `rows` holds, in order (BlindPrediction.size rows each), for the label party to
    # combine and score itself and answer once for all (vfl_core.inference.blind)
    blind: tuple[BlindPrediction, ...] = ()


@dataclass(frozen=True)
class BlindPrediction:
    """An evaluation batch's prediction that the coordinator relays unread (encrypted relay):
    the heads' probabilities sealed for the label party and what the coordinator would have
    combined them with, so that it never holds a prediction it could pair with the scores."""

    request_id: int  # the Predict request the heads answered
    heads: dict[int, np.ndarray | Sealed]  # head block -> (B, C) probabilities
    present: tuple[int, ...]  # the observed set they predicted from
    first: int  # the batch's first sample (key index), which keys its random draws
    threshold: float | None = None  # binary: P(positive) threshold; None: the argmax
    federation_scores: bool = False  # also the federation's positive-class probability
    guess: str = ""  # standard VFL with a block missing: the name of its random guess
    size: int = 0  # the batch's rows (its share of ScoreCall.rows)


@dataclass(frozen=True)
class ScoreResult:
    """What a label party returns for a ScoreCall: per named prediction, aggregates only."""

    confusion: dict[str, np.ndarray] = field(default_factory=dict)  # (C, C) int64 [true, pred]
    # binary classification: (2, bins) int64 counts of the positive-class probability in equal
    # bins over [0, 1]; row 0 the true negatives' scores, row 1 the true positives'
    histograms: dict[str, np.ndarray] = field(default_factory=dict)
    # regression: (5,) float64 sums over the batch: squared error, absolute error, count,
    # target, squared target (vfl_core.inference.scoring.SUMS)
    sums: dict[str, np.ndarray] = field(default_factory=dict)
    # classification of more than two classes: (2,) float64 sums over the batch of the
    # per-sample Brier score and of its square (vfl_core.inference.scoring.brier_sums)
    brier: dict[str, np.ndarray] = field(default_factory=dict)

    def names(self) -> set[str]:
        return {*self.confusion, *self.histograms, *self.sums, *self.brier}


class Transport(Protocol):
    """How the round engine reaches parties. Every fan-out method takes one call per party and
    returns the results of the parties that answered in time; a party that failed, refused or
    missed its deadline is simply absent (the engine treats it as a missing block)."""

    def infos(self) -> dict[int, PartyInfo]: ...

    def id_hashes(self, split: str, blocks: list[int]) -> dict[int, list[bytes]]: ...

    def class_weights(self, block: int, split: str) -> np.ndarray | None: ...

    def validation_strata(self, block: int) -> np.ndarray | None: ...

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]: ...

    def fuse(self, calls: dict[int, FuseCall]) -> dict[int, FuseResult]: ...

    def backward(self, calls: dict[int, BackwardCall]) -> set[int]: ...

    def predict(self, calls: dict[int, PredictCall]) -> dict[int, np.ndarray]: ...

    def train(self, calls: dict[int, TrainCall]) -> Callable[[], dict[int, TrainResult]]:
        """Start one TrainCall per party; the returned function waits for the answers (a party
        that failed or missed the deadline is absent). A transport may run the calls at once
        (in process) or in the background (gRPC): the engine keeps at most one call with
        backward/embed and one with fuse in flight per party, and results never depend on how
        those two interleave (they touch f_k and g_k respectively)."""
        ...

    def score(self, block: int, call: ScoreCall) -> ScoreResult | None: ...

    # Fault tolerance (issue 5)
    def checkpoint(self, round_id: int, blocks: list[int]) -> set[int]:
        """Ask `blocks` to save their state after round `round_id`; returns those that saved."""
        ...

    def snapshot(self, round_id: int, blocks: list[int], restore: bool) -> set[int]:
        """Ask `blocks` to keep a copy of their state after round `round_id` in memory, or with
        `restore` to go back to the copy they kept of it (early stopping); returns those that
        did."""
        ...

    def rejoined(self) -> set[int]:
        """Blocks whose party registered again (restarted or reconnected) since the last call."""
        ...

    # PSI alignment (vfl_core.training.psi); needed only with Federation(alignment="psi")
    def psi_blind(self, split: str, session: str, blocks: list[int]) -> dict[int, list[bytes]]: ...

    def psi_apply(self, calls: dict[int, PsiCall]) -> dict[int, list[bytes]]: ...

    def psi_keys(self, calls: dict[int, PsiCall]) -> set[int]: ...

    # A method's own steps (vfl_core.methods): DVFL's, DLVM's, a plug-in's
    def step(self, method: str, step: str, calls: Mapping[int, Any]) -> dict[int, Any]:
        """Step `step` of method `method`, one typed call per party (the step's call type,
        vfl_core.methods.steps.StepSpec); the answers of the parties that answered in time,
        each checked against the step's reply schema. Every transport checks each call against
        the step's request schema before the party's handler sees it."""
        ...


@dataclass(frozen=True)
class SamplePrediction:
    """The federation's answer for one sample, as the coordinator's Predict service returns it."""

    id_hash: bytes
    observed: tuple[int, ...]  # blocks whose embeddings were used (O')
    party_probs: dict[int, np.ndarray]  # head block -> (C,) (regression: (1,), the value)
    federation: np.ndarray | None  # (C,), mean of the heads' probabilities (or values)
    predicted_class: int  # -1 when no head party could predict, and for regression
    predicted_value: float | None = None  # regression: the federation's prediction
    # block -> the sample's row in that party's split: each party can name its own samples
    # (after a PSI alignment nobody else can; vfl predict --party-dir)
    rows: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Registration:
    """The coordinator's answer to a registration (or a heartbeat, which is one).

    `session` names the coordinator's process: it changes when the coordinator restarts. A party
    is only called once it has registered again quoting the current session, which it does after
    rolling its state back to its checkpoint of `resume_round` (or earlier; -1: initial state).
    """

    run_id: str
    config_json: str
    message: str
    session: str
    resume_round: int
    lease: str = ""  # quoted in the party's next registrations (vfl_coordinator.registry)
