"""LASER-VFL's party side (and its baselines'): what a party does in Embed, Fuse, Backward, the
pipelined Train and Predict, on the Party's public interface (vfl_core.methods.party_port).

The method spec (vfl_core.methods.registry) decides which representation slots and heads the
party uses; with LASER-VFL it is one f_k and, if the party holds labels, one g_k. Every call is
checked against the party's own state (round, rows, digest, shapes) and refused with a
ProtocolError rather than corrupting the model. Calls of a training round are idempotent: a
retried Embed or Fuse returns the cached answer and a retried Backward does nothing. Local
steps (TrainConfig.local_steps) follow a round's exact update, once. With fresh_own_tower under
staleness (vfl_core.methods.laser.fresh_own), the head party embeds its own rows at Fuse with its
current tower and steps it there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import groupby

import numpy as np
import torch

from vfl_core.data.learning_task import REGRESSION
from vfl_core.errors import ProtocolError, StaleRoundError, VflError
from vfl_core.methods.gradient_sum import received_gradient
from vfl_core.methods.laser import fresh_own
from vfl_core.methods.laser.head_inputs import HeadInputs
from vfl_core.methods.laser.local_steps import Cache, FuseCache, LocalSteps
from vfl_core.methods.laser.objective import sampled_loss
from vfl_core.methods.laser.stale import StaleEmbeddings
from vfl_core.methods.party_port import PartyPort
from vfl_core.methods.spec import BLEND, SHARED, HeadTask, Subset
from vfl_core.model import stash
from vfl_core.model.model_config import wire_width
from vfl_core.protocol import (
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
    PredictCall,
    TrainCall,
    TrainResult,
)
from vfl_core.seeding import Stream


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
    local: Cache | None = None  # with local steps: the round's tensors they reuse
    fresh: torch.Tensor | None = None  # fresh own tower: the rows' features, embedded at Fuse
    fresh_own: bool = False  # the round embeds at Fuse (EmbedCall.fresh_own)


class LaserSteps:
    """One party's LASER-VFL steps and the rounds it has in flight."""

    def __init__(self, party: PartyPort, *, build_models: bool) -> None:
        self.party = party
        self.spec = party.spec
        self.rounds: dict[int, _Round] = {}  # embedded rounds awaiting Fuse or Backward
        # its fuses step its own tower: the federation's Embed calls said fresh_own
        # (TrainConfig.fresh_own_tower as the federation resolved it, which a party cannot)
        self.fresh_own = False
        # ((f_k steps so far, slots), their weights): the copy rounds embedded since share
        self._stash: tuple[tuple[int, tuple[Subset, ...]], list[stash.Stash]] | None = None
        self._f_steps = 0
        self.heads = LaserHeads(party)
        self.local = LocalSteps(party, self.heads, partial(self._embed, train=True))
        meta = party.data.meta
        if build_models:  # the shared f_k and, at a label party whose method has one, g_k
            party.models.rep(SHARED)
        if build_models and meta.has_labels and self.spec.label_parties_hold_head:
            for key in (SHARED, *self.spec.extra_heads):
                party.models.head(key)
        self.stale: StaleEmbeddings | None = None
        if self.spec.replacement == "stale" and meta.has_labels and "train" in party.data.splits:
            rows = len(party.data.splits["train"])
            self.stale = StaleEmbeddings(rows, wire_width(party.config.model), party.device)

    def reset(self) -> None:
        """Forget the rounds in flight (the party loaded other weights)."""
        self.rounds = {}
        self._stash = None

    # ----------------------------------------------------------------- Embed
    def embed(self, call: EmbedCall) -> np.ndarray:
        p = self.party
        slots = self.spec.slot_keys(p.block, call.blocks or (p.block,))
        if not call.train:
            x = p.batch(call.split, call.rows, call.digest)
            with torch.no_grad():
                return p.to_wire(self._embed(x, slots, train=False))
        current = self.rounds.get(call.round_id)
        if current is not None:
            if not np.array_equal(current.rows, call.rows) or current.digest != call.digest:
                raise ProtocolError(f"round {call.round_id}: embed repeated with other rows")
            if current.wire is None:
                raise ProtocolError(f"round {call.round_id}: embed after a labels-only fuse")
            return current.wire
        if call.round_id <= p.last_round:
            raise StaleRoundError(
                f"round {call.round_id} is stale: party is at round {p.last_round}"
            )
        own = fresh_own.taken(p, call)  # (what it says recorded; refused before the rows)
        x = p.batch(call.split, call.rows, call.digest)
        if own:  # its tower runs at Fuse, and no one reads its rows: what leaves is no rows
            self.fresh_own = True
            wire = np.zeros((0, len(slots) * wire_width(p.config.model)), np.float32)  # (0, width)
            state = _Round(call.round_id, call.rows, call.digest, slots, None, wire, fresh=x)
            state.fresh_own = True
            self._start(state)
            return wire
        stashes = self._stashes(slots) if p.config.staleness else None
        embedding = self._embed(x, slots, train=True, stashes=stashes)  # (B, len(slots) * d)
        local = Cache(x, embedding.detach()) if self.local.steps else None
        embedding = p.guard.embedding(embedding)  # clipped and noised, if configured
        wire = p.to_wire(embedding)
        state = _Round(call.round_id, call.rows, call.digest, slots, embedding, wire, stashes)
        state.local = local
        self._start(state)
        return wire

    def _start(self, state: _Round) -> _Round:
        """Keep a new round (and the few before it the configuration keeps in flight)."""
        p = self.party
        p.last_round = max(p.last_round, state.round_id)
        keep = p.last_round - p.config.rounds_kept
        self.rounds = {r: s for r, s in self.rounds.items() if r > keep}
        self.rounds[state.round_id] = state
        return state

    def _embed(
        self,
        x: torch.Tensor,
        slots: list[Subset],
        train: bool,
        stashes: list[stash.Stash] | None = None,
    ) -> torch.Tensor:
        outputs, bank = [], self.party.models
        for i, key in enumerate(slots):  # evaluation: averaged weights (weight_average)
            model = bank.rep(key) if train else bank.evaluated_rep(key)
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
            self._stash = (key, [stash.snapshot(self.party.models.rep(k)) for k in slots])
        return self._stash[1]

    def _current(self, round_id: int, phase: str) -> _Round:
        state = self.rounds.get(round_id)
        if state is None:
            have = ", ".join(map(str, sorted(self.rounds))) or "none"
            raise StaleRoundError(
                f"{phase} for round {round_id}, but the party embedded round {have}"
            )
        return state

    # ----------------------------------------------------------------- Fuse
    def fuse(self, call: FuseCall) -> FuseResult:
        p = self.party
        meta = p.data.meta
        if not meta.has_labels:
            raise ProtocolError(f"party {p.party_id} holds no labels and has no fusion head")
        # A label-only holder's round starts here (it embedded nothing); the others' at Embed.
        state = (
            self._current(call.round_id, "fuse") if call.rows is None else self._labels_only(call)
        )
        if state.fuse_result is not None:
            return state.fuse_result
        blocks = call.blocks or tuple(sorted({*call.embeddings, p.block}))
        others = {
            b: p.from_wire(
                e, f"embedding of block {b}", len(state.rows), self.heads.width(b, blocks)
            ).requires_grad_(True)
            for b, e in sorted(call.embeddings.items())
            if b != p.block
        }
        if state.fresh is not None:  # its current tower: exact for its own features
            state.embedding = p.guard.embedding(self._embed(state.fresh, state.slots, train=True))
        own = None if state.embedding is None else state.embedding.detach().requires_grad_(True)
        embeddings = others if own is None else {p.block: own, **others}
        if self.stale is not None:  # absent blocks answer with what they sent last time
            self.stale.remember(state.rows, others)
            absent = [b for b in range(meta.num_blocks) if b not in embeddings]
            embeddings.update(self.stale.recall(state.rows, absent))
        tasks = self.spec.fuse_tasks(
            p.block,
            sorted(embeddings),
            meta.num_blocks,
            call.label_blocks or (p.block,),
            p.stream(Stream.TASKS, call.round_id),
            _unlabelled(call.label_blocks, meta.num_blocks),
        )
        weight = row_weight(p.config.round_loss, len(state.rows), call.batch)
        loss = self.heads.train(tasks, embeddings, blocks, state.rows, call.epoch, weight)
        state.own_grad = None if own is None else _grad_or_zeros(own)
        if state.fresh is not None:  # stepped now: the next round's Fuse embeds with it
            state.fresh = None
            self._step(state, state.own_grad, call.epoch)
        # the batch's labels, once, for a gradient defence that reads them (vfl_core.privacy)
        guarded = p.guard.config.gradient_defence != "none"
        labels = p.targets(state.rows).reshape(-1) if guarded else None
        state.fuse_result = FuseResult(
            loss=loss,
            # A block in no task gets a zero gradient (it did not influence L_k).
            grads={
                b: p.to_wire(p.guard.gradient(_grad_or_zeros(t), labels, state.rows, b))
                for b, t in others.items()
            },
        )
        if state.local is not None:
            own_key = () if own is None else (p.block,)
            state.local.fuse = FuseCache(
                {b: e.detach() for b, e in embeddings.items() if b not in own_key},
                tuple(blocks),
                tuple(call.label_blocks or (p.block,)),
                _unlabelled(call.label_blocks, meta.num_blocks),
                weight,
            )
            if state.embedding is None:  # a labels-only round has no Backward: its steps now
                self._local_steps(state, None, call.epoch)
        return state.fuse_result

    def _labels_only(self, call: FuseCall) -> _Round:
        """The round of a batch whose labels the party holds but not its features (rows of
        its label-only part of the train split): it starts at Fuse, as Embed starts others."""
        assert call.rows is not None
        p = self.party
        current = self.rounds.get(call.round_id)
        if current is not None:
            same = np.array_equal(current.rows, call.rows) and current.digest == call.digest
            if current.wire is not None or not same:
                raise ProtocolError(f"round {call.round_id}: fuse repeated with other rows")
            return current
        # With staleness the Fuse lane may reach a party after its Embed lane has started
        # later rounds: a labels-only round within the rounds kept is not stale.
        oldest = p.last_round - (p.config.rounds_kept if p.config.staleness else 0)
        if call.round_id <= oldest:
            raise StaleRoundError(
                f"round {call.round_id} is stale: party is at round {p.last_round}"
            )
        p.check_digest("train", call.rows, call.digest)
        if call.rows.min() < len(p.split("train").features):
            raise ProtocolError(
                f"round {call.round_id}: party {p.party_id} holds features of some rows of "
                f"this batch; it embeds them instead of fusing on labels only"
            )
        state = _Round(call.round_id, call.rows, call.digest, [], None, None)
        state.local = Cache(None, None) if self.local.steps else None
        return self._start(state)

    # ----------------------------------------------------------------- Backward and Train
    def backward(self, call: BackwardCall) -> None:
        state = self._current(call.round_id, "backward")
        if state.stepped:
            return
        if state.wire is None:
            raise ProtocolError(f"round {call.round_id}: party embedded nothing to update")
        summed = received_gradient(call, self.party.config.wire_dtype)  # parts added here
        if state.fresh_own:  # its own gradient stepped at Fuse; no other head reads its rows
            if summed is not None:
                raise ProtocolError(
                    f"round {call.round_id}: fresh_own_tower: party {self.party.party_id} got "
                    "another head's gradient for its own tower (the option needs one head party)"
                )
            state.stepped = True
            return
        assert state.embedding is not None
        grad, received = state.own_grad, None
        if summed is not None:
            width = state.embedding.shape[1]
            received = self.party.from_wire(summed, "summed gradient", len(state.rows), width)
            grad = received if grad is None else received + grad
        state.stepped = True
        if grad is None or self._frozen():
            state.local = None
            return
        self._step(state, grad, call.epoch)
        self._local_steps(state, received, call.epoch)

    def _step(self, state: _Round, grad: torch.Tensor, epoch: int) -> None:
        """f_k's step on the round's embedding with gradient `grad` (B, width)."""
        assert state.embedding is not None
        models = self.party.models
        opts = [models.rep_opts[k] for k in state.slots]
        models.set_lr(opts, epoch)
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        if state.stashes is None:
            state.embedding.backward(grad)
        else:  # through the weights that computed it (vfl_core.model.stash)
            reps = [models.rep(k) for k in state.slots]
            stash.backward_into(state.embedding, grad, reps, state.stashes)
        for opt in opts:
            opt.step()
        self._f_steps += 1

    def _frozen(self) -> bool:
        """Under the `withhold` label defence a feature-only party's bottom model stays as
        drawn: a step on the zero gradient it receives would still apply the optimiser's weight
        decay (torch's Adam adds it to the gradient and normalises, so every weight would move
        by about the learning rate towards zero each round, erasing the tower's features)."""
        p = self.party
        return p.guard.config.gradient_defence == "withhold" and not p.data.meta.has_labels

    def _local_steps(self, state: _Round, received: torch.Tensor | None, epoch: int) -> None:
        """The round's local steps (TrainConfig.local_steps), after its exact update; then its
        cached tensors are dropped."""
        if state.local is not None:
            self.local.run(state.round_id, state.rows, state.slots, state.local, received, epoch)
            state.local = None

    def train(self, call: TrainCall) -> TrainResult:
        """A pipelined call (vfl_core.training.pipeline): its backwards, fuses and embeds in that
        order, through the party's own entry points.
        Stops at the first step refused; if that is the first step, the call is refused."""
        p = self.party
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
                    p.backward(c)
                    stepped.append(c.round_id)
                elif isinstance(c, FuseCall):
                    fused[c.round_id] = p.fuse(c)
                elif not c.train:
                    raise ProtocolError("a pipelined call embeds training rounds only")
                else:
                    embeddings[c.round_id] = p.embed(c)
            except VflError as err:
                if i == 0:
                    raise
                why = f"{phase} of round {c.round_id}: {err}"
                return TrainResult(tuple(stepped), fused, embeddings, why)
        return TrainResult(tuple(stepped), fused, embeddings)

    def predict(self, call: PredictCall) -> np.ndarray:
        return self.heads.predict(call)


class LaserHeads:
    """A party's heads in LASER-VFL's steps: trained on the sampled tasks at Fuse, fed a
    subset's embeddings at Predict."""

    def __init__(self, party: PartyPort) -> None:
        self.party = party
        self.spec = party.spec
        self.inputs = HeadInputs(party)
        self.fused, self.width = self.inputs.fused, self.inputs.width

    # ----------------------------------------------------------------- Fuse
    def train(
        self,
        tasks: list[HeadTask],
        embeddings: Mapping[int, torch.Tensor],
        blocks: Sequence[int],
        rows: np.ndarray,
        epoch: int,
        weight: float = 1.0,
    ) -> float:
        """One step of the heads on the round's sampled loss, times `weight` (`row_weight`);
        returns the loss, the mean over the round's rows."""
        if not tasks:
            return 0.0
        models = self.party.models
        target = self.party.targets(rows)
        keys = sorted({t.head for t in tasks})
        for key in keys:
            models.head(key).train()
        opts = [models.head_opts[k] for k in keys]
        models.set_lr(opts, epoch)
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss = self.tasks_loss(tasks, embeddings, blocks, target)
        (loss * weight).backward()  # x 1.0 is exact: a full round steps as before
        for opt in opts:
            opt.step()
        return float(loss.detach())

    def tasks_loss(
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
                self.party.models.head(key),
                embeddings,
                [(t.subset, t.weight) for t in run],
                target,
                self.party.loss_fn,
                fuse=partial(self.fused, key, blocks=blocks),
            )
            for key, run in groupby(tasks, key=lambda t: t.head)
        ]
        return sum(losses[1:], losses[0])

    # ----------------------------------------------------------------- Predict
    def predict(self, call: PredictCall) -> np.ndarray:
        p = self.party
        if p.block not in call.embeddings and not self._serves(call):
            raise ProtocolError(f"predict for party {p.party_id} lacks its own block {p.block}")
        sizes = {e.shape[0] for e in call.embeddings.values()}
        if len(sizes) != 1:
            raise ProtocolError(f"predict embeddings disagree in batch size: {sorted(sizes)}")
        batch = sizes.pop()
        blocks = call.blocks or tuple(sorted(call.embeddings))
        embeddings = {
            b: p.from_wire(e, f"embedding of block {b}", batch, self.width(b, blocks))
            for b, e in sorted(call.embeddings.items())
        }
        names = self.spec.blend_members if call.head == BLEND else (call.head,)
        if not names:
            raise ProtocolError(f"method {self.spec.name} has no head {BLEND!r}: one head")
        outputs = [self._output(embeddings, blocks, name) for name in names]
        # BLEND: the mean of the heads' probabilities or values (one head: its own, exactly)
        return p.to_wire(outputs[0] if len(outputs) == 1 else torch.stack(outputs).mean(dim=0))

    def _output(
        self, embeddings: Mapping[int, torch.Tensor], blocks: Sequence[int], name: str
    ) -> torch.Tensor:
        """Head `name`'s (B, C) probabilities or (B, 1) values in original units."""
        p = self.party
        head_key, subset = self.spec.predict_subset(p.block, sorted(embeddings), name)
        head = p.models.evaluated_head(head_key)  # averaged, with TrainConfig.weight_average
        head.eval()
        with torch.no_grad():
            output = head(self.fused(head_key, embeddings, subset, blocks))
            if p.task == REGRESSION:
                return p.scaler.restore(output)
            return torch.softmax(output, dim=1)

    def _serves(self, call: PredictCall) -> bool:
        """Whether the head predicts without its own block: for a set of feature-only blocks
        (heads that serve them), or any set (a zero-imputing method: its own embedding is 0)."""
        labelled = set(call.embeddings) & set(call.label_blocks)
        serves = self.spec.serves_feature_only and bool(call.label_blocks) and not labelled
        return serves or self.spec.zero_imputes


def _unlabelled(label_blocks: Sequence[int], num_blocks: int) -> tuple[int, ...]:
    """The feature-only blocks, when the call names the label blocks (else none is known)."""
    if not label_blocks:
        return ()
    return tuple(b for b in range(num_blocks) if b not in label_blocks)


def _grad_or_zeros(leaf: torch.Tensor) -> torch.Tensor:
    return leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)


def row_weight(round_loss: str, rows: int, batch: int) -> float:
    """What a round's loss (the mean over its `rows`) is multiplied by: with `round_loss` "rows"
    and the plan's `batch` sent, rows / batch, so that every training row weighs the same over
    an epoch whatever the size of its batch (TrainConfig.round_loss); else 1."""
    if round_loss != "rows" or batch <= 0:  # "mean", or "auto" unresolved: as before
        return 1.0
    return rows / batch
