"""A method defined outside vfl_core, for tests/test_plugin_method.py: "local heads".

Every label party trains its own f_k and g_k on its own block of each batch it holds, and
predicts from it alone. The method has one step, "LocalHead" (train or predict), its schema, its
party-side handler (on Party's public interface only) and a round program; nothing in proto/,
vfl_wire/, vfl_client/ or vfl_coordinator/ knows it. Only a loss and, at inference, class
probabilities leave a party. Classification only.

It registers itself when imported: name it in VFL_METHOD_MODULES (with this directory on
PYTHONPATH) for the vfl-client and vfl-coordinator processes; a test process imports it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from vfl_core.errors import ProtocolError, StaleRoundError
from vfl_core.methods.combination import combine
from vfl_core.methods.laser.specs import own_block_task
from vfl_core.methods.outcomes import PredictionBatch, RoundRecord, batch_prediction
from vfl_core.methods.registry import REGISTRY, register
from vfl_core.methods.schema import BATCH, ScalarSpec, Schema, TensorSpec
from vfl_core.methods.spec import MethodSpec, ProgramHooks
from vfl_core.methods.steps import StepSpec

if TYPE_CHECKING:
    from vfl_core.data.batch_plan import Batch
    from vfl_core.methods.federation_port import FederationPort
    from vfl_core.training.party import Party

METHOD = "local_heads"
STEP = "LocalHead"


@dataclass(frozen=True)
class HeadCall:
    round_id: int
    split: str
    rows: np.ndarray  # (B,) the party's own rows
    digest: bytes
    train: bool


@dataclass(frozen=True)
class HeadAnswer:
    loss: float  # of the training step (0 at inference)
    probabilities: np.ndarray | None = None  # (B, C) at inference


def local_head(party: Party, call: HeadCall) -> HeadAnswer:
    """Train g_k(f_k(x_k)) on the party's rows of the batch, or predict with it."""
    f, g = party.f, party.g
    if g is None or party.g_opt is None:
        raise ProtocolError(f"party {party.party_id} holds no labels: no local head")
    x = party.batch(call.split, call.rows, call.digest)  # (B, *feature_shape)
    if not call.train:
        f.eval()
        g.eval()
        with torch.no_grad():
            return HeadAnswer(0.0, party.to_wire(torch.softmax(g(f(x)), dim=1)))  # (B, C)
    if call.round_id <= party.last_round:
        raise StaleRoundError(f"round {call.round_id}: party is at {party.last_round}")
    f.train()
    g.train()
    party.f_opt.zero_grad(set_to_none=True)
    party.g_opt.zero_grad(set_to_none=True)
    loss = party.loss_fn(g(f(x)), party.targets(call.rows))
    loss.backward()
    party.f_opt.step()
    party.g_opt.step()
    party.last_round = call.round_id
    return HeadAnswer(float(loss.detach()))


def _probabilities_iff_predict(call: HeadCall, answer: HeadAnswer) -> None:
    if (answer.probabilities is None) == (not call.train):
        raise ProtocolError("local head: probabilities exactly when predicting")


LOCAL_HEAD = StepSpec(
    name=STEP,
    request=Schema((ScalarSpec("train", bool),), split=True, rows="required", what="local head"),
    reply=Schema(
        (
            ScalarSpec("loss", float, what="local head loss"),
            TensorSpec("probabilities", "float32", (BATCH, "C"), optional=True),
        )
    ),
    handler=local_head,
    call_type=HeadCall,
    result_type=HeadAnswer,
    phase="fuse",
    training=lambda call: call.train,
    check_reply=_probabilities_iff_predict,
)


class LocalHeadRounds(ProgramHooks):
    """The coordinator's side: each round, every label party of the batch takes its step."""

    def train_round(
        self, fed: FederationPort, round_id: int, epoch: int, batch: Batch
    ) -> RoundRecord:
        answers = self._ask(fed, "train", batch, round_id, None, train=True)
        losses = {b: a.loss for b, a in sorted(answers.items()) if np.isfinite(a.loss)}
        return RoundRecord(round_id, epoch, batch.pattern, tuple(losses), losses, tuple(losses))

    def predict_batch(
        self,
        fed: FederationPort,
        split: str,
        batch: Batch,
        request: int,
        blocks: Collection[int] | None,
    ) -> PredictionBatch:
        answers = self._ask(fed, split, batch, request, blocks, train=False)
        probs = {b: a.probabilities for b, a in answers.items() if a.probabilities is not None}
        present = tuple(sorted(probs))
        combined = combine(fed.spec.combination, present, probs, fed.eval_rng(batch), False)
        return batch_prediction(batch, present, probs, combined, False)

    @staticmethod
    def _ask(
        fed: FederationPort,
        split: str,
        batch: Batch,
        round_id: int,
        blocks: Collection[int] | None,
        train: bool,
    ) -> dict[int, HeadAnswer]:
        al = fed.alignments[split]
        heads = [b for b in batch.pattern if b in fed.label_blocks]
        heads = [b for b in heads if blocks is None or b in blocks]
        digest = al.digest(batch.index)
        calls = {
            b: HeadCall(round_id, split, al.rows_of(b, batch.index), digest, train) for b in heads
        }
        return fed.transport.step(METHOD, STEP, calls) if calls else {}


SPEC = MethodSpec(
    name=METHOD,
    display_name="Local heads (plug-in)",
    fusion="mean",
    slots="shared",
    heads="label_parties",
    tasks=own_block_task,
    combination="heads",
    replacement="nothing",
    own_block_only=True,
    program=LocalHeadRounds(),
    steps=(LOCAL_HEAD,),
)

if METHOD not in REGISTRY:  # imported once by VFL_METHOD_MODULES and once by a test: one spec
    register(SPEC)
