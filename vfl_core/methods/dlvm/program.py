"""The coordinator's schedule of the latent-variable VFL (vfl_core.methods.dlvm.roles), run by the
round engine.

The coordinator holds no weights. It relays the parties' experts, draws the latent samples from
their product (weight-free arithmetic on what it relays anyway, seeded from the run's seed), and
relays the decoders' answers to the active party and the active party's gradients back. A run has
two stages, each a range of the engine's epochs, so the cursor, checkpoints and logs work as for
every method:

1. `epochs` epochs of the importance-weighted bound (kappa samples) over every training sample,
   labelled or not, in the engine's single-pattern batches. A round: Embed (each party holding
   the batch: its expert), the coordinator draws h, Decode (each party that sent an expert; with
   MNAR every live party, a party without the batch modelling that it misses it), Step (the
   active party: the bound, its own update, every party's gradients), Backward (each party).
2. `dlvm.stage2_epochs` epochs over the training samples the active party holds a label for
   (it names their rows once; the coordinator learns which samples are labelled, never a
   label): Embed, Decode without gradients, Step (the classifier's loss). The paper's stage 2
   (`dlvm.stage2` "frozen", the default) ends there: Theta_g is fixed and no gradient crosses
   the wire. With "finetune" (not the paper's) the step returns the experts' gradients and
   Backward follows (the encoders fine-tune).

Inference: Embed, the coordinator draws L samples, Decode, and the active party's SNIS
probabilities (DlvmPredict). The active party need not hold the sample; a sample is scored where
a label party holds it.

Deadlines: a party that misses Embed is a missing block of the round's posterior; one that
misses Decode adds no likelihood term (the posterior it shaped is still a valid importance
proposal, so the bound stays a bound, on the blocks that answered); one that misses Backward
skips the update. Without the active party nothing trains and nothing is predicted.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

import numpy as np

from vfl_core.data.batch_plan import Batch, epoch_plan
from vfl_core.methods.combination import combine
from vfl_core.methods.dlvm.messages import (
    DecodeCall,
    Decoded,
    DlvmBackwardCall,
    LabelledRowsCall,
    Stage,
    StepCall,
    StepResult,
)
from vfl_core.methods.dlvm.sampling import latent_samples
from vfl_core.methods.federation_port import FederationPort
from vfl_core.methods.outcomes import PredictionBatch, RoundRecord, batch_prediction
from vfl_core.methods.spec import active_party
from vfl_core.protocol import EmbedCall

log = logging.getLogger(__name__)
_NO_ROWS = np.zeros(0, dtype=np.int64)
DLVM = "dlvm"  # the method's name in the registry, which its steps travel under


@dataclass
class DlvmProgram:
    fed: FederationPort
    # Key indices of the training samples whose label the active party holds (stage 2's plan),
    # asked once; part of the coordinator's checkpoint.
    labelled: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.cfg = self.fed.config.dlvm

    # ------------------------------------------------------------------ schedule
    def stage(self, epoch: int) -> Stage:
        return Stage.BOUND if epoch < self.fed.config.epochs else Stage.CLASSIFIER

    @property
    def active(self) -> int | None:
        return active_party(self.fed.label_blocks)

    def plan(self, epoch: int) -> list[Batch] | None:
        """Stage 1: the engine's plan; stage 2: the labelled samples of the active party."""
        if self.stage(epoch) == Stage.BOUND:
            return None
        keys = self._labelled_keys()
        if keys is None:
            return self._await_active()
        # the subset keeps which rows are label-only: the active party may hold a sample's label
        # and not its block (the paper's label routing), and then does not embed it
        sub = self.fed.alignments["train"].subset(keys)
        size = self.fed.config.batch_rows(len(keys))  # a method with stages: no table rule
        plan = epoch_plan(sub, self.fed.config.seed, epoch, size)
        return [Batch(b.pattern, keys[b.index]) for b in plan]  # indices of the full alignment

    def _labelled_keys(self) -> np.ndarray | None:
        if self.labelled is not None:
            return self.labelled
        fed, active = self.fed, self.active
        rows = None if active is None else self._labelled_rows(active)
        if active is None or rows is None:
            log.warning("stage 2: the active party did not name its labelled rows: waiting for it")
            return None
        held = fed.alignments["train"].rows[active]
        self.labelled = np.flatnonzero((held >= 0) & np.isin(held, rows))
        log.info("stage 2: %d labelled training samples at block %d", len(self.labelled), active)
        return self.labelled

    def _await_active(self) -> list[Batch]:
        """The epoch of an active party that did not name its labelled rows (down, frozen or cut
        off as stage 2 began): it is marked down, and the epoch is one round without samples,
        before which the engine pauses until it is back (or fails the run after
        --rejoin-timeout), so that stage 2 does not pass by without the classifier. Before,
        every epoch of stage 2 ran no round and the run ended `ok` with an untrained one."""
        active = self.active
        if active is None:
            return []
        self.fed.record([active], (), "labelled rows", "stage 2", immediate=True)
        return [Batch((active,), _NO_ROWS)]

    def _labelled_rows(self, block: int) -> np.ndarray | None:
        """The training rows `block` holds a label for (None: it did not answer)."""
        samples = self.fed.infos[block].samples.get("train", 0)
        call = LabelledRowsCall("train", samples)
        return self.fed.transport.step(DLVM, "LabelledRows", {block: call}).get(block)

    # ------------------------------------------------------------------ training rounds
    def run_round(self, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
        """One round (the engine has polled the parties that registered again)."""
        fed, active, stage = self.fed, self.active, self.stage(epoch)
        nothing = RoundRecord(round_id, epoch, batch.pattern, (), {}, ())
        if not len(batch.index):  # the wait for the active party (_await_active): ask again
            if active is not None and fed.liveness.should_call(active, fed.tick):
                named = (active,) if self._labelled_keys() is not None else ()
                fed.record([active], named, "labelled rows", f"round {round_id}")
            return nothing
        if active is None or not fed.liveness.should_call(active, fed.tick):
            return nothing  # the bound and the classifier live at the active party
        al, where = fed.alignments["train"], f"round {round_id}"
        digest = al.digest(batch.index)
        callees = tuple(b for b in batch.pattern if fed.liveness.should_call(b, fed.tick))
        # the paper's frozen stage 2 needs no graph through the encoders: nothing flows back
        graph = stage == Stage.BOUND or self.cfg.stage2 == "finetune"
        calls = {
            b: EmbedCall(round_id, "train", al.rows_of(b, batch.index), digest, graph, callees)
            for b in callees
        }
        experts = fed.accept(fed.transport.embed(calls), callees, len(batch.index), "embed", where)
        if not experts:
            return nothing
        present = tuple(sorted(experts))
        kappa = self.cfg.kappa
        answers = self._decode(round_id, "train", stage, batch, experts, kappa, where)
        call = StepCall(round_id, epoch, stage, self.cfg.kappa, experts, answers)
        if stage == Stage.CLASSIFIER:  # the active party's labels of the batch
            call = replace(call, rows=al.rows_of(active, batch.index), digest=digest)
        result = self._step(active, call, where)
        if result is None:
            return RoundRecord(round_id, epoch, batch.pattern, present, {}, ())
        backward = {b: DlvmBackwardCall(round_id, epoch, g) for b, g in result.grads.items()}
        updated = {active}  # the frozen stage 2: only the classifier learned, no Backward
        if backward:
            updated = set(fed.transport.step(DLVM, "DlvmBackward", backward))
            fed.record(backward, updated, "backward", where)
        return RoundRecord(
            round_id, epoch, batch.pattern, present, {active: result.loss}, tuple(sorted(updated))
        )

    def _decode(
        self,
        round_id: int,
        split: str,
        stage: Stage,
        batch: Batch,
        experts: dict[int, np.ndarray],
        samples: int,
        where: str,
        blocks: Collection[int] | None = None,
    ) -> dict[int, Decoded]:
        """Draw h from the experts' product and ask the decoders for their terms (with their
        gradients in stage 1)."""
        fed, train = self.fed, stage == Stage.BOUND
        al = fed.alignments[split]
        h = latent_samples(experts, fed.config, stage, round_id, samples)
        digest = al.digest(batch.index)
        calls = {
            b: DecodeCall(round_id, split, al.rows_of(b, batch.index), digest, h, train)
            for b in experts
        }
        if self.cfg.mnar:  # the live parties without the batch model that they miss it
            for b in sorted(fed.infos):
                reachable = blocks is None or b in blocks
                if b not in batch.pattern and reachable and fed.liveness.should_call(b, fed.tick):
                    calls[b] = DecodeCall(round_id, split, None, b"", h, train)
        answers = fed.transport.step(DLVM, "DlvmDecode", calls) if calls else {}
        good = {b: a for b, a in answers.items() if b in calls and _decoded_ok(a, h.shape, train)}
        for b in answers.keys() - good.keys():
            log.warning("%s: decode answer of block %d refused (shape/dtype/NaN)", where, b)
        fed.record(calls, good, "decode", where, immediate=stage == Stage.PREDICT)
        return good

    def _step(self, active: int, call: StepCall, where: str) -> StepResult | None:
        fed = self.fed
        answer = fed.transport.step(DLVM, "DlvmStep", {active: call}).get(active)
        if answer is not None and not _grads_ok(answer, call):
            log.warning("%s: step answer of block %d refused (shapes/NaN)", where, active)
            answer = None
        fed.record([active], {} if answer is None else {active: answer}, "step", where)
        return answer

    # ------------------------------------------------------------------ inference
    def predict_batch(
        self, split: str, batch: Batch, request: int, blocks: Collection[int] | None
    ) -> PredictionBatch:
        fed, active = self.fed, self.active
        experts, _ = fed.inference_embeddings(split, batch, request, blocks)
        present = tuple(sorted(experts))
        usable = active is not None and (blocks is None or active in blocks)
        if not experts or not usable or not fed.liveness.should_call(active, fed.tick):
            return PredictionBatch(batch.index, batch.pattern, present, {}, None)
        where, samples = f"{split} request {request}", self.cfg.predict_samples
        answers = self._decode(
            request, split, Stage.PREDICT, batch, experts, samples, where, blocks
        )
        call = StepCall(request, 0, Stage.PREDICT, samples, experts, answers)
        got = fed.transport.step(DLVM, "DlvmPredict", {active: call})
        size = (len(batch.index), fed.num_classes)
        probs = {b: p for b, p in got.items() if b == active and _fits(p, size)}
        fed.record([active], probs, "predict", where, immediate=True)
        combined = combine(fed.spec.combination, present, probs, fed.eval_rng(batch), False)
        return batch_prediction(batch, present, probs, combined, False)

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, object]:
        """Plain data for the coordinator's checkpoint (Federation.snapshot)."""
        return {"labelled": None if self.labelled is None else self.labelled.tolist()}

    def load_state(self, saved: Mapping[str, object]) -> None:
        labelled = saved.get("labelled")
        self.labelled = None if labelled is None else np.asarray(labelled, dtype=np.int64)

    def stats(self) -> dict[str, object]:
        """What results.json reports of the method."""
        return {"labelled_samples": None if self.labelled is None else len(self.labelled)}


def _fits(array: np.ndarray | None, shape: tuple[int, ...]) -> bool:
    """float32 of exactly this shape, every value finite."""
    return (
        array is not None
        and array.dtype == np.float32
        and array.shape == shape
        and bool(np.isfinite(array).all())
    )


def _decoded_ok(answer: Decoded, shape: tuple[int, ...], train: bool) -> bool:
    """A decoder's terms (B, S), and in training their gradient in h (B, S, d)."""
    if not _fits(answer.log_lik, shape[:2]):
        return False
    return _fits(answer.grad, shape) if train else answer.grad is None


def _grads_ok(result: StepResult, call: StepCall) -> bool:
    """A finite loss, and gradients only for the blocks of the round, of their shapes."""
    batch = len(next(iter(call.experts.values())))
    width = next(iter(call.experts.values())).shape[1]
    if not np.isfinite(result.loss):
        return False
    for b, g in result.grads.items():
        if b not in call.experts and b not in call.answers:
            return False
        if g.expert is not None and (b not in call.experts or not _fits(g.expert, (batch, width))):
            return False
        terms = (batch, call.samples)
        if g.log_lik is not None and (b not in call.answers or not _fits(g.log_lik, terms)):
            return False
    return True
