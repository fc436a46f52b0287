"""One party of the federation: its data block, its models, optimisers and RNG.

A Party answers the calls of `vfl_core.protocol` and knows nothing of how they arrive. Every call
is checked against the party's own state (round, rows, digest, shapes) and refused with a
ProtocolError rather than corrupting the model. Calls of a training round are idempotent: a
retried Embed or Fuse returns the cached answer and a retried Backward does nothing.

The method (laser or a baseline, see `vfl_core.algorithms.methods`) decides which representation
slots and
heads the party uses; with LASER-VFL it is one f_k and, if the party holds labels, one g_k.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import groupby
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from vfl_core.algorithms.laser import Subset, fuse_mean, sampled_loss
from vfl_core.algorithms.method_spec import SHARED, HeadTask, ProgramHooks
from vfl_core.algorithms.stale import StaleEmbeddings
from vfl_core.config import TrainConfig
from vfl_core.data.learning_task import REGRESSION, TargetScaler, head_loss, output_width
from vfl_core.data.missingness import UNLABELLED
from vfl_core.data.party_dir import PartyData, PartySplit, labelled_rows_only
from vfl_core.errors import ConfigError, ProtocolError, StaleRoundError, VflError
from vfl_core.inference.scoring import score_batch
from vfl_core.model.model_bank import ModelBank
from vfl_core.protocol import (
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
    PartyInfo,
    PredictCall,
    ScoreCall,
    ScoreResult,
    TrainCall,
    TrainResult,
)
from vfl_core.seeding import Stream, rng
from vfl_core.training import stash
from vfl_core.training.alignment import batch_digest, hash_ids
from vfl_core.training.psi import PartyPsi, check_keys

if TYPE_CHECKING:  # a method's party state is built by its spec (ProgramHooks.party_state)
    from vfl_core.methods.dlvm.roles import DlvmRoles
    from vfl_core.methods.dvfl.roles import DvflRoles

log = logging.getLogger(__name__)


@dataclass
class _Round:
    """What a party remembers of the training round in progress."""

    round_id: int
    rows: np.ndarray
    digest: bytes
    slots: list[Subset]  # representation slots concatenated in `embedding`, in order
    # (B, len(slots) * d), attached to the slots' graphs; None when the party holds only the
    # batch's labels (label-only rows: it fuses, embeds nothing and has nothing to update)
    embedding: torch.Tensor | None
    wire: np.ndarray | None  # what was sent
    stashes: list[stash.Stash] | None = None  # with staleness: the slots' weights it used
    fuse_result: FuseResult | None = None
    own_grad: torch.Tensor | None = None  # dL_k/dE_k from the party's own heads
    stepped: bool = False


class Party:
    def __init__(
        self,
        party_id: str,
        data: PartyData,
        config: TrainConfig,
        *,
        secret: bytes,
        device: torch.device | str = "cpu",
    ) -> None:
        self.party_id = party_id
        self.config = config
        self.spec = config.spec
        # Most methods learn only from labels: unlabelled training rows (vfl prepare --labels)
        # take no part, as if the label party did not hold them; dvfl's guests learn from them.
        self.data = data if self.spec.unlabelled_rows else labelled_rows_only(data)
        self.device = torch.device(device)
        self.block = data.meta.block
        self._secret = secret
        self._hashes: dict[str, list[bytes]] = {}
        self._psi_keys: dict[str, list[bytes]] = {}  # split -> final PSI values of its rows
        self.psi = PartyPsi(max_lists=max(1, data.meta.num_blocks - 1))
        self._features: dict[str, torch.Tensor] = {}
        self._rounds: dict[int, _Round] = {}  # embedded rounds awaiting Fuse or Backward
        # ((f_k steps so far, slots), their weights): the copy rounds embedded since share
        self._stash: tuple[tuple[int, tuple[Subset, ...]], list[stash.Stash]] | None = None
        self._f_steps = 0
        self.last_round = -1
        self._kept: tuple[int, dict] | None = None  # (round, state) for early stopping
        meta = data.meta
        self.task = meta.task
        self.loss_fn = head_loss(meta.task)
        # Regression targets in standard units, from this party's own training labels: the
        # statistics never leave it, predictions leave in original units.
        train = data.splits.get("train")
        labels = train.labels if train is not None and self.task == REGRESSION else None
        self.scaler = TargetScaler.fit(labels)
        self.models = ModelBank(
            config,
            meta.block,
            meta.num_blocks,
            tuple(meta.feature_shape),
            output_width(meta.task, meta.num_classes),
            self.device,
            categorical=tuple(meta.categorical),
        )
        # A method with a round program may keep models of its own here (dvfl: its guest, host
        # replica and owner, vfl_core.methods.dvfl.roles) instead of f_k and g_k: an object
        # with embed(EmbedCall), modules(), state_dict() and load_state_dict(state, last_round).
        hooks = self.spec.program if isinstance(self.spec.program, ProgramHooks) else None
        self.roles = None if hooks is None else hooks.party_state(self)
        if self.roles is None:
            self.models.rep(SHARED)
        if self.roles is None and meta.has_labels and self.spec.label_parties_hold_head:
            self.models.head(SHARED)
        self._stale: StaleEmbeddings | None = None
        if self.spec.replacement == "stale" and meta.has_labels and "train" in data.splits:
            rows = len(data.splits["train"])
            self._stale = StaleEmbeddings(rows, config.model.embed_dim, self.device)

    # ----------------------------------------------------------------- the shared f_k and g_k
    @property
    def f(self) -> nn.Module:
        return self.models.reps[SHARED]

    @property
    def f_opt(self) -> torch.optim.Optimizer:
        return self.models.rep_opts[SHARED]

    @property
    def g(self) -> nn.Module | None:
        return self.models.heads.get(SHARED)

    @property
    def g_opt(self) -> torch.optim.Optimizer | None:
        return self.models.head_opts.get(SHARED)

    # ----------------------------------------------------------------- identity and alignment
    @property
    def info(self) -> PartyInfo:
        return party_info(self.party_id, self.data)

    def id_hashes(self, split: str) -> list[bytes]:
        if split not in self._hashes:
            self._hashes[split] = hash_ids(self.split(split).ids.tolist(), self._secret)
        return self._hashes[split]

    # PSI alignment (vfl_core.training.psi): the party's secret never leaves this object.
    def psi_blind(self, split: str, session: str) -> list[bytes]:
        return self.psi.blind(session, split, self.split(split).ids.tolist())

    def psi_apply(self, split: str, session: str, points: Sequence[bytes]) -> list[bytes]:
        self.split(split)
        return self.psi.apply(session, split, points)

    def set_alignment_keys(self, split: str, keys: Sequence[bytes]) -> None:
        """The final PSI values of this party's rows: from now on its batch digests use them."""
        self._psi_keys[split] = check_keys(keys, len(self.split(split)), f"psi keys of {split}")

    def alignment_keys(self, split: str) -> list[bytes]:
        """What the batch digests of `split` are computed over: the PSI values if the
        federation aligned with PSI, else the keyed ID hashes."""
        return self._psi_keys.get(split) or self.id_hashes(split)

    def class_weights(self, split: str) -> np.ndarray | None:
        """Per-row inverse class frequency, for class-balanced resampling (reveals classes to
        the coordinator, which is why balancing is opt-in)."""
        labels = self.split(split).labels
        if labels is None or self.task == REGRESSION:
            return None
        known = labels != UNLABELLED  # an unlabelled row (vfl prepare --labels N) weighs 0
        counts = np.bincount(labels[known], minlength=self.data.meta.num_classes)
        weights = 1.0 / np.maximum(counts.astype(np.float64), 1.0)
        return np.where(known, weights[np.maximum(labels, 0)], 0.0)

    # ----------------------------------------------------------------- training round
    def embed(self, call: EmbedCall) -> np.ndarray:
        if self.roles is not None:  # a method's own (dvfl: a guest's activations; dlvm: an expert)
            return self.roles.embed(call)
        slots = self.spec.slot_keys(self.block, call.blocks or (self.block,))
        if not call.train:
            x = self.batch(call.split, call.rows, call.digest)
            with torch.no_grad():
                return self.to_wire(self._embed(x, slots, train=False))
        current = self._rounds.get(call.round_id)
        if current is not None:
            if not np.array_equal(current.rows, call.rows) or current.digest != call.digest:
                raise ProtocolError(f"round {call.round_id}: embed repeated with other rows")
            if current.wire is None:
                raise ProtocolError(f"round {call.round_id}: embed after a labels-only fuse")
            return current.wire
        if call.round_id <= self.last_round:
            raise StaleRoundError(
                f"round {call.round_id} is stale: party is at round {self.last_round}"
            )
        x = self.batch(call.split, call.rows, call.digest)
        stashes = self._stashes(slots) if self.config.staleness else None
        embedding = self._embed(x, slots, train=True, stashes=stashes)  # (B, len(slots) * d)
        wire = self.to_wire(embedding)
        self._start(_Round(call.round_id, call.rows, call.digest, slots, embedding, wire, stashes))
        return wire

    def _start(self, state: _Round) -> _Round:
        """Keep a new round (and the few before it the configuration keeps in flight)."""
        self.last_round = max(self.last_round, state.round_id)
        keep = self.last_round - self.config.rounds_kept
        self._rounds = {r: s for r, s in self._rounds.items() if r > keep}
        self._rounds[state.round_id] = state
        return state

    def _embed(
        self,
        x: torch.Tensor,
        slots: list[Subset],
        train: bool,
        stashes: list[stash.Stash] | None = None,
    ) -> torch.Tensor:
        outputs = []
        for i, key in enumerate(slots):
            model = self.models.rep(key)
            model.train(train)
            if stashes is None:
                outputs.append(model(x))  # (B, d)
            else:
                outputs.append(stash.forward(model, stashes[i], x))  # (B, d)
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)

    def _stashes(self, slots: list[Subset]) -> list[stash.Stash]:
        """Copies of the slots' weights, shared by the rounds embedded before f_k steps again."""
        key = (self._f_steps, tuple(slots))
        if self._stash is None or self._stash[0] != key:
            self._stash = (key, [stash.snapshot(self.models.rep(k)) for k in slots])
        return self._stash[1]

    def fuse(self, call: FuseCall) -> FuseResult:
        if not self.data.meta.has_labels:
            raise ProtocolError(f"party {self.party_id} holds no labels and has no fusion head")
        # A label-only holder's round starts here (it embedded nothing); the others' at Embed.
        state = (
            self._current(call.round_id, "fuse") if call.rows is None else self._labels_only(call)
        )
        if state.fuse_result is not None:
            return state.fuse_result
        blocks = call.blocks or tuple(sorted({*call.embeddings, self.block}))
        others = {
            b: self.from_wire(
                e, f"embedding of block {b}", len(state.rows), self._width(b, blocks)
            ).requires_grad_(True)
            for b, e in sorted(call.embeddings.items())
            if b != self.block
        }
        own = None if state.embedding is None else state.embedding.detach().requires_grad_(True)
        embeddings = others if own is None else {self.block: own, **others}
        if self._stale is not None:  # absent blocks answer with what they sent last time
            self._stale.remember(state.rows, others)
            absent = [b for b in range(self.data.meta.num_blocks) if b not in embeddings]
            embeddings.update(self._stale.recall(state.rows, absent))
        tasks = self.spec.fuse_tasks(
            self.block,
            sorted(embeddings),
            self.data.meta.num_blocks,
            call.label_blocks or (self.block,),
            rng(self.config.seed, Stream.TASKS, call.round_id, self.block),
            _unlabelled(call.label_blocks, self.data.meta.num_blocks),
        )
        loss = self._train_heads(tasks, embeddings, blocks, state.rows, call.epoch)
        state.own_grad = None if own is None else _grad_or_zeros(own)
        state.fuse_result = FuseResult(
            loss=loss,
            # A block in no task gets a zero gradient (it did not influence L_k).
            grads={b: self.to_wire(_grad_or_zeros(t)) for b, t in others.items()},
        )
        return state.fuse_result

    def _labels_only(self, call: FuseCall) -> _Round:
        """The round of a batch whose labels the party holds but not its features (rows of
        its label-only part of the train split): it starts at Fuse, as Embed starts others."""
        assert call.rows is not None
        current = self._rounds.get(call.round_id)
        if current is not None:
            same = np.array_equal(current.rows, call.rows) and current.digest == call.digest
            if current.embedding is not None or not same:
                raise ProtocolError(f"round {call.round_id}: fuse repeated with other rows")
            return current
        # With staleness the Fuse lane may reach a party after its Embed lane has started
        # later rounds: a labels-only round within the rounds kept is not stale.
        oldest = self.last_round - (self.config.rounds_kept if self.config.staleness else 0)
        if call.round_id <= oldest:
            raise StaleRoundError(
                f"round {call.round_id} is stale: party is at round {self.last_round}"
            )
        self.check_digest("train", call.rows, call.digest)
        if call.rows.min() < len(self.split("train").features):
            raise ProtocolError(
                f"round {call.round_id}: party {self.party_id} holds features of some rows of "
                f"this batch; it embeds them instead of fusing on labels only"
            )
        return self._start(_Round(call.round_id, call.rows, call.digest, [], None, None))

    def _train_heads(
        self,
        tasks: list[HeadTask],
        embeddings: Mapping[int, torch.Tensor],
        blocks: Sequence[int],
        rows: np.ndarray,
        epoch: int,
    ) -> float:
        if not tasks:
            return 0.0
        target = self.targets(rows)
        keys = sorted({t.head for t in tasks})
        for key in keys:
            self.models.head(key).train()
        opts = [self.models.head_opts[k] for k in keys]
        self.models.set_lr(opts, epoch)
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss = self._tasks_loss(tasks, embeddings, blocks, target)
        loss.backward()
        for opt in opts:
            opt.step()
        return float(loss.detach())

    def _tasks_loss(
        self,
        tasks: list[HeadTask],
        embeddings: Mapping[int, torch.Tensor],
        blocks: Sequence[int],
        target: torch.Tensor,
    ) -> torch.Tensor:
        """sum_tasks weight * loss(head(fused subset), target), through laser.sampled_loss (the
        function the unbiasedness test enumerates), once per run of tasks on the same head: one
        run for LASER-VFL, one per subset for the combinatorial baseline. Heads output (B, C)
        logits, or (B, 1) standardised values."""
        losses = [
            sampled_loss(
                self.models.head(key),
                embeddings,
                [(t.subset, t.weight) for t in run],
                target,
                self.loss_fn,
                fuse=partial(self._fused, key, blocks=blocks),
            )
            for key, run in groupby(tasks, key=lambda t: t.head)
        ]
        return sum(losses[1:], losses[0])

    def backward(self, call: BackwardCall) -> None:
        state = self._current(call.round_id, "backward")
        if state.stepped:
            return
        if state.embedding is None:
            raise ProtocolError(f"round {call.round_id}: party embedded nothing to update")
        grad = state.own_grad
        if call.grad is not None:
            width = state.embedding.shape[1]
            received = self.from_wire(call.grad, "summed gradient", len(state.rows), width)
            grad = received if grad is None else received + grad
        state.stepped = True
        if grad is None:
            return
        opts = [self.models.rep_opts[k] for k in state.slots]
        self.models.set_lr(opts, call.epoch)
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        if state.stashes is None:
            state.embedding.backward(grad)
        else:  # through the weights that computed it (vfl_core.training.stash)
            models = [self.models.rep(k) for k in state.slots]
            stash.backward_into(state.embedding, grad, models, state.stashes)
        for opt in opts:
            opt.step()
        self._f_steps += 1

    def train(self, call: TrainCall) -> TrainResult:
        """A pipelined call (vfl_core.training.pipeline): its backwards, fuses and embeds in that
        order.
        Stops at the first step refused; if that is the first step, the call is refused."""
        steps: list[tuple[str, BackwardCall | FuseCall | EmbedCall]] = [
            *(("backward", c) for c in call.backward),
            *(("fuse", c) for c in call.fuse),
            *(("embed", c) for c in call.embed),
        ]
        stepped: list[int] = []
        fused: dict[int, FuseResult] = {}
        embeddings: dict[int, np.ndarray] = {}
        for i, (phase, c) in enumerate(steps):
            try:
                if isinstance(c, BackwardCall):
                    self.backward(c)
                    stepped.append(c.round_id)
                elif isinstance(c, FuseCall):
                    fused[c.round_id] = self.fuse(c)
                elif not c.train:
                    raise ProtocolError("a pipelined call embeds training rounds only")
                else:
                    embeddings[c.round_id] = self.embed(c)
            except VflError as err:
                if i == 0:
                    raise
                why = f"{phase} of round {c.round_id}: {err}"
                return TrainResult(tuple(stepped), fused, embeddings, why)
        return TrainResult(tuple(stepped), fused, embeddings)

    # ----------------------------------------------------------------- a method's own steps
    def step(self, method: str, step: str, call: Any) -> Any:
        """One step of a method that brings its own phases (vfl_core.methods): its handler,
        with this party, on a call already checked against the step's schema."""
        if method != self.config.method:
            raise ProtocolError(f"party {self.party_id} trains {self.config.method}, not {method}")
        return self.spec.step(step).handler(self, call)

    @property
    def dvfl(self) -> DvflRoles | None:
        """The party's DVFL tiers, when it trains dvfl."""
        return self.roles if self.config.method == "dvfl" else None

    @property
    def dlvm(self) -> DlvmRoles | None:
        """The party's latent-variable VFL networks, when it trains dlvm."""
        return self.roles if self.config.method == "dlvm" else None

    # ----------------------------------------------------------------- inference and scoring
    def predict(self, call: PredictCall) -> np.ndarray:
        if not self.data.meta.has_labels:
            raise ProtocolError(f"party {self.party_id} holds no labels and has no fusion head")
        if self.dvfl is not None:  # the owner, on the hosts' outputs (its own need not be there)
            return self.dvfl.owner_predict(call.embeddings)
        if self.block not in call.embeddings and not self._serves(call):
            raise ProtocolError(
                f"predict for party {self.party_id} lacks its own block {self.block}"
            )
        sizes = {e.shape[0] for e in call.embeddings.values()}
        if len(sizes) != 1:
            raise ProtocolError(f"predict embeddings disagree in batch size: {sorted(sizes)}")
        batch = sizes.pop()
        blocks = call.blocks or tuple(sorted(call.embeddings))
        embeddings = {
            b: self.from_wire(e, f"embedding of block {b}", batch, self._width(b, blocks))
            for b, e in sorted(call.embeddings.items())
        }
        head_key, subset = self.spec.predict_subset(self.block, sorted(embeddings))
        head = self.models.head(head_key)
        head.eval()
        with torch.no_grad():
            output = head(self._fused(head_key, embeddings, subset, blocks))
            if self.task == REGRESSION:
                return self.to_wire(self.scaler.restore(output))  # (B, 1) original units
            return self.to_wire(torch.softmax(output, dim=1))

    def _serves(self, call: PredictCall) -> bool:
        """Whether the head predicts without its own block: for a set of feature-only blocks
        (heads that serve them), or any set (a zero-imputing method: its own embedding is 0)."""
        labelled = set(call.embeddings) & set(call.label_blocks)
        serves = self.spec.serves_feature_only and bool(call.label_blocks) and not labelled
        return serves or self.spec.zero_imputes

    def _fused(
        self,
        head: Subset,
        embeddings: Mapping[int, torch.Tensor],
        subset: Subset,
        blocks: Sequence[int],
    ) -> torch.Tensor:
        """A head's input: the mean of the subset's embeddings (laser.fuse_mean), or
        (baselines) a concatenation: of all K blocks with zeros for the absent ones (svfl, plug),
        or of the subset's own slot of each member (combinatorial)."""
        if not self.spec.concatenates:
            return fuse_mean(embeddings, subset)  # (B, d)
        d = self.config.model.embed_dim
        if self.spec.fusion == "concat_slots":
            parts = [self._slot(embeddings[b], b, head, blocks) for b in sorted(subset)]
        else:
            size = next(iter(embeddings.values())).shape[0]
            zeros = torch.zeros(size, d, device=self.device)
            parts = [
                embeddings[b] if b in subset else zeros for b in range(self.data.meta.num_blocks)
            ]
        return torch.cat(parts, dim=1)  # (B, n * d)

    def _slot(
        self, embedding: torch.Tensor, block: int, key: Subset, blocks: Sequence[int]
    ) -> torch.Tensor:
        d = self.config.model.embed_dim
        i = self.spec.slot_keys(block, blocks).index(key)
        return embedding[:, i * d : (i + 1) * d]  # (B, d)

    def _width(self, block: int, blocks: Sequence[int]) -> int:
        return len(self.spec.slot_keys(block, blocks)) * self.config.model.embed_dim

    def score(self, call: ScoreCall) -> ScoreResult:
        """Aggregates of each named prediction on this batch against the party's labels:
        confusion matrices (true x predicted) and, for binary tasks, AUC histograms; error and
        target sums for regression (vfl_core.inference.scoring)."""
        self.check_digest(call.split, call.rows, call.digest)
        labels = self.split(call.split).labels
        if labels is None:
            raise ProtocolError(f"party {self.party_id} holds no labels to score with")
        return score_batch(self.task, self.data.meta.num_classes, labels[call.rows], call)

    def replace_split(self, name: str, split: PartySplit | None) -> None:
        """Swap in another evaluation split (e.g. the same test samples with other missingness)."""
        splits = {k: v for k, v in self.data.splits.items() if k != name}
        if split is not None:
            splits[name] = split
        self.data = replace(self.data, splits=splits)  # keeps meta and preprocessing
        self._hashes.pop(name, None)
        self._psi_keys.pop(name, None)
        self._features.pop(name, None)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, object]:
        state: dict[str, object] = {"last_round": self.last_round, **self.models.state_dict()}
        if self.data.preprocessing is not None:  # the weights only make sense with it
            state["preprocessing"] = self.data.preprocessing
        if self.roles is not None:  # a method's own models, under its name
            return {**state, self.config.method: self.roles.state_dict()}
        # The shared models also under their short names, for readers of one-model checkpoints.
        state["f"], state["f_opt"] = self.f.state_dict(), self.f_opt.state_dict()
        if self.g is not None and self.g_opt is not None:
            state["g"], state["g_opt"] = self.g.state_dict(), self.g_opt.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        if state.get("preprocessing", self.data.preprocessing) != self.data.preprocessing:
            raise ConfigError(
                f"party {self.party_id}: the checkpoint was trained with another fitted "
                f"preprocessing than this party's data"
            )
        self.models.load_state_dict(state)
        self.last_round = int(state["last_round"])
        self._rounds = {}
        self._stash = None
        if self.roles is not None:
            self.roles.load_state_dict(state[self.config.method], self.last_round)

    def keep_snapshot(self, round_id: int, state: dict | None = None) -> bool:
        """Keep a copy of the state after `round_id` in memory (early stopping's best epoch so
        far; vfl_core.training.early_stop), replacing the one kept before. `state`: a copy
        kept earlier, read back from disk by a restarted party (default: the current state)."""
        self._kept = (round_id, copy.deepcopy(self.state_dict() if state is None else state))
        return True

    def forget_snapshot_after(self, round_id: int) -> None:
        """Drop the kept copy if it is of a round after `round_id`: a restarted coordinator
        rolled back past it, so it belongs to a future that will not happen."""
        if self._kept is not None and self._kept[0] > round_id:
            self._kept = None

    def restore_snapshot(self, round_id: int) -> bool:
        """Go back to the state kept after `round_id` (weights and optimisers; the round counter
        stays, so later rounds are still told from stale ones). False: none kept of that round
        (this process started after it)."""
        if self._kept is None or self._kept[0] != round_id:
            return False
        self.load_state_dict({**self._kept[1], "last_round": self.last_round})
        return True

    def parameters_vector(self) -> np.ndarray:
        """All weights flattened (for equivalence tests and fingerprints)."""
        if self.roles is not None:
            modules = self.roles.modules()
            return torch.cat(
                [p.detach().cpu().reshape(-1) for m in modules for p in m.parameters()]
            ).numpy()
        return self.models.parameters_vector().numpy()

    # ----------------------------------------------------------------- what methods use
    # The public interface a method's party side (vfl_core.methods) builds on: the party's
    # splits, its rows checked against their digest, its targets and loss, the wire's float32
    # arrays in and out. (Its random streams are vfl_core.seeding's, keyed by the config's seed
    # and `block`; its optimisers vfl_core.model.model_bank.make_optimizer(module, config).)
    def split(self, split: str) -> PartySplit:
        """The party's split `split`; another is a ProtocolError."""
        try:
            return self.data.splits[split]
        except KeyError:
            raise ProtocolError(f"party {self.party_id} has no '{split}' split") from None

    def check_digest(self, split: str, rows: np.ndarray, digest: bytes) -> None:
        """Refuse rows outside the split, or whose keys' digest is not `digest` (the plans of
        the coordinator and the party disagree)."""
        n = len(self.split(split))
        if rows.dtype.kind not in "iu":
            raise ProtocolError(f"rows for split '{split}' must be integers, not {rows.dtype}")
        if rows.ndim != 1 or rows.size == 0 or rows.min() < 0 or rows.max() >= n:
            raise ProtocolError(f"rows out of range for split '{split}' with {n} samples")
        hashes = self.alignment_keys(split)
        if batch_digest(hashes[int(r)] for r in rows) != digest:
            raise ProtocolError(f"batch digest mismatch on split '{split}': plans disagree")

    def batch(self, split: str, rows: np.ndarray, digest: bytes) -> torch.Tensor:
        """The features of `rows` (checked as by check_digest), (B, *feature_shape)."""
        self.check_digest(split, rows, digest)
        if rows.max() >= len(self.split(split).features):
            raise ProtocolError(
                f"rows of split '{split}' include label-only rows: party {self.party_id} holds "
                f"no features for them"
            )
        if split not in self._features:
            self._features[split] = torch.from_numpy(self.split(split).features).to(self.device)
        return self._features[split][torch.from_numpy(rows).to(self.device)]  # (B, *shape)

    def targets(self, rows: np.ndarray) -> torch.Tensor:
        """The training batch's targets: (B,) classes, or (B, 1) standardised values."""
        labels = self.split("train").labels
        assert labels is not None
        target = torch.from_numpy(labels[rows]).to(self.device)
        if self.task == REGRESSION:
            return self.scaler.standardize(target.unsqueeze(1))  # (B,) -> (B, 1)
        return target

    def _current(self, round_id: int, phase: str) -> _Round:
        state = self._rounds.get(round_id)
        if state is None:
            have = ", ".join(map(str, sorted(self._rounds))) or "none"
            raise StaleRoundError(
                f"{phase} for round {round_id}, but the party embedded round {have}"
            )
        return state

    def from_wire(self, array: np.ndarray, what: str, batch: int, width: int) -> torch.Tensor:
        """A received (batch, width) float32 array as a tensor of the party's own."""
        if array.dtype != np.float32 or array.shape != (batch, width):
            got = f"{array.dtype} {tuple(array.shape)}"
            raise ProtocolError(f"{what}: got {got}, expected float32 ({batch}, {width})")
        if not np.isfinite(array).all():
            raise ProtocolError(f"{what}: contains NaN or Inf")
        # A copy into torch's own (64-byte aligned) memory: SIMD kernels may round differently
        # for differently aligned inputs, and numpy buffers from the wire or another party are
        # aligned by chance; this keeps gRPC and in-process runs bit-identical.
        return torch.from_numpy(array).to(self.device, copy=True)

    @staticmethod
    def to_wire(t: torch.Tensor) -> np.ndarray:
        """A tensor as the float32 array that leaves the party (a copy)."""
        return t.detach().to("cpu", torch.float32).numpy().copy()

    # The names these had before they were public, for code written against them.
    _split, _check_digest, _batch, _targets = split, check_digest, batch, targets


def party_info(party_id: str, data: PartyData) -> PartyInfo:
    """What a party with this data says about itself (before it has a training config)."""
    meta = data.meta
    return PartyInfo(
        party_id=party_id,
        block=meta.block,
        num_blocks=meta.num_blocks,
        dataset=meta.dataset,
        feature_shape=tuple(meta.feature_shape),
        num_classes=meta.num_classes,
        has_labels=meta.has_labels,
        samples={name: len(split) for name, split in data.splits.items()},
        task=meta.task,
        label_only={name: s.label_only for name, s in data.splits.items() if s.label_only},
    )


def _unlabelled(label_blocks: Sequence[int], num_blocks: int) -> tuple[int, ...]:
    """The feature-only blocks, when the call names the label blocks (else none is known)."""
    if not label_blocks:
        return ()
    return tuple(b for b in range(num_blocks) if b not in label_blocks)


def _grad_or_zeros(leaf: torch.Tensor) -> torch.Tensor:
    return leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
