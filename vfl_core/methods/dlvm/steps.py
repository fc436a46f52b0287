"""The steps of the latent-variable VFL on the generic Step: their schemas and what a party does
in each (vfl_core.methods.dlvm.messages describes a round).

Symbols: B the batch, S the samples of h (the call's `samples`, at most MAX_SAMPLES), latent the
size d of h and expert its [mean | log-variance] width 2d (the run's DlvmConfig), C the classes.
No step carries a feature or a label; LabelledRows answers with row indices only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from vfl_core.errors import ProtocolError
from vfl_core.methods.dlvm.messages import (
    DecodeCall,
    Decoded,
    DlvmBackwardCall,
    LabelledRowsCall,
    PartyGrads,
    Stage,
    StepCall,
    StepResult,
)
from vfl_core.methods.record import Record, StepHeader
from vfl_core.methods.schema import BATCH, INDEX, ScalarSpec, Schema, TensorSpec
from vfl_core.methods.steps import StepSpec

if TYPE_CHECKING:
    from vfl_core.methods.dlvm.roles import DlvmRoles
    from vfl_core.methods.party_port import PartyPort
    from vfl_core.methods.spec import RunConfig

MAX_SAMPLES = 10_000  # DlvmConfig.predict_samples' bound
MAX_BATCH = 2**31
LATENT, EXPERT, SAMPLES = "latent", "expert", "S"
_LIMITS = (
    (BATCH, 1, MAX_BATCH, "no sample or too many"),
    (SAMPLES, 1, MAX_SAMPLES, "no sample or too many"),
)


def dims(config: RunConfig) -> dict[str, int]:
    return {LATENT: config.dlvm.latent_dim, EXPERT: 2 * config.dlvm.latent_dim}


def _roles(party: PartyPort) -> DlvmRoles:
    roles = party.dlvm
    if roles is None:
        raise ProtocolError(f"party {party.party_id} trains {party.config.method}, not dlvm")
    return roles


# --------------------------------------------------------------------------------- DlvmDecode
def decode(party: PartyPort, call: DecodeCall) -> Decoded:
    party.split(call.split)
    return _roles(party).decode(call)


def _decode_reply(call: DecodeCall, answer: Decoded) -> None:
    if (answer.grad is not None) != call.train:
        raise ProtocolError(f"log-likelihood gradient: {'missing' if call.train else 'unasked'}")


DECODE = StepSpec(
    name="DlvmDecode",
    request=Schema(
        (
            TensorSpec("h", "float32", (BATCH, SAMPLES, LATENT), what="latent samples"),
            ScalarSpec("train", bool),
        ),
        split=True,
        rows="optional",  # unset: the party does not hold the batch (MNAR)
        limits=_LIMITS,
        what="decode",
    ),
    reply=Schema(
        (
            TensorSpec("log_lik", "float32", (BATCH, SAMPLES), what="log-likelihood"),
            TensorSpec(
                "grad",
                "float32",
                (BATCH, SAMPLES, LATENT),
                optional=True,
                what="log-likelihood gradient",
            ),
        )
    ),
    handler=decode,
    call_type=DecodeCall,
    result_type=Decoded,
    phase="fuse",
    training=lambda call: call.split == "train",
    check_reply=_decode_reply,
)


# --------------------------------------------------------------------- DlvmStep, DlvmPredict
def _step_schema(stages: tuple[Stage, ...]) -> Schema:
    return Schema(
        (
            ScalarSpec("stage", int, choices=tuple(int(s) for s in stages), what="step stage"),
            ScalarSpec("samples", int, low=1, high=MAX_SAMPLES, what="step samples", binds="S"),
            ScalarSpec("epoch", int, low=0, what="step epoch"),
            TensorSpec("experts", "float32", (BATCH, EXPERT), keyed=True, what="expert"),
            TensorSpec("log_liks", "float32", (BATCH, SAMPLES), keyed=True, what="log-likelihood"),
            TensorSpec("grads", "float32", (BATCH, SAMPLES, LATENT), keyed=True, what="gradient"),
        ),
        rows="optional",  # stage 2: the active party's rows (its labels)
        limits=_LIMITS,
        what="step",
        rules=(_step_rules,),
    )


def _step_rules(header: StepHeader | None, record: Record) -> None:
    stage = record.scalars.get("stage")
    if not record.maps.get("experts"):
        raise ProtocolError("step experts: none")
    grads, log_liks = record.maps.get("grads", {}), record.maps.get("log_liks", {})
    if (stage == Stage.BOUND and grads.keys() != log_liks.keys()) or (
        stage != Stage.BOUND and grads
    ):
        raise ProtocolError("step gradients: one per log-likelihood in stage 1, none otherwise")
    if header is not None and (header.rows is not None) != (stage == Stage.CLASSIFIER):
        raise ProtocolError("step rows: the classifier stage and only it names its rows")


def _pack_step(call: StepCall) -> tuple[StepHeader, Record]:
    header = StepHeader(call.round_id, "", call.rows, call.digest)
    record = Record(
        maps={
            "experts": dict(call.experts),
            "log_liks": {b: a.log_lik for b, a in call.answers.items()},
            "grads": {b: a.grad for b, a in call.answers.items() if a.grad is not None},
        },
        scalars={"stage": int(call.stage), "samples": call.samples, "epoch": call.epoch},
    )
    return header, record


def _unpack_step(header: StepHeader, record: Record) -> StepCall:
    grads = record.maps.get("grads", {})
    answers = {b: Decoded(v, grads.get(b)) for b, v in sorted(record.maps["log_liks"].items())}
    return StepCall(
        round_id=header.round_id,
        epoch=int(record.scalars.get("epoch", 0)),
        stage=Stage(record.scalars["stage"]),
        samples=int(record.scalars["samples"]),
        experts=dict(sorted(record.maps["experts"].items())),
        answers=answers,
        rows=header.rows,
        digest=header.digest,
    )


def _pack_result(result: StepResult) -> Record:
    grads = result.grads
    return Record(
        maps={
            "log_lik_grads": {b: g.log_lik for b, g in grads.items() if g.log_lik is not None},
            "expert_grads": {b: g.expert for b, g in grads.items() if g.expert is not None},
        },
        scalars={"loss": result.loss},
    )


def _unpack_result(record: Record, call: StepCall) -> StepResult:
    log_lik, expert = record.maps.get("log_lik_grads", {}), record.maps.get("expert_grads", {})
    if not log_lik.keys() <= call.answers.keys() or not expert.keys() <= call.experts.keys():
        raise ProtocolError("step gradients: for a block that took no part in the round")
    blocks = sorted({*log_lik, *expert})
    grads = {b: PartyGrads(log_lik.get(b), expert.get(b)) for b in blocks}
    return StepResult(float(record.scalars.get("loss", 0.0)), grads)


def step(party: PartyPort, call: StepCall) -> StepResult:
    result = _roles(party).step(call)
    party.last_round = max(party.last_round, call.round_id)
    return result


STEP = StepSpec(
    name="DlvmStep",
    request=_step_schema((Stage.BOUND, Stage.CLASSIFIER)),
    reply=Schema(
        (
            ScalarSpec("loss", float, what="step loss"),
            TensorSpec(
                "log_lik_grads",
                "float32",
                (BATCH, SAMPLES),
                keyed=True,
                what="log-likelihood gradient",
            ),
            TensorSpec(
                "expert_grads", "float32", (BATCH, EXPERT), keyed=True, what="expert gradient"
            ),
        )
    ),
    handler=step,
    phase="fuse",
    pack_call=_pack_step,
    unpack_call=_unpack_step,
    pack_result=_pack_result,
    unpack_result=_unpack_result,
)


def predict(party: PartyPort, call: StepCall) -> np.ndarray:
    """The active party's SNIS class probabilities, (B, C)."""
    return _roles(party).predict(call)


PREDICT = StepSpec(
    name="DlvmPredict",
    request=_step_schema((Stage.PREDICT,)),
    reply=Schema((TensorSpec("probabilities", "float32", (BATCH, "C")),)),
    handler=predict,
    phase="predict",
    pack_call=_pack_step,
    unpack_call=_unpack_step,
)


# ------------------------------------------------------------------------------- DlvmBackward
def _pack_backward(call: DlvmBackwardCall) -> tuple[StepHeader, Record]:
    tensors = {"log_lik_grad": call.grads.log_lik, "expert_grad": call.grads.expert}
    record = Record(
        tensors={k: v for k, v in tensors.items() if v is not None},
        scalars={"epoch": call.epoch},
    )
    return StepHeader(call.round_id), record


def _unpack_backward(header: StepHeader, record: Record) -> DlvmBackwardCall:
    grads = PartyGrads(record.tensors.get("log_lik_grad"), record.tensors.get("expert_grad"))
    return DlvmBackwardCall(header.round_id, int(record.scalars.get("epoch", 0)), grads)


def backward(party: PartyPort, call: DlvmBackwardCall) -> None:
    _roles(party).backward(call)


BACKWARD = StepSpec(
    name="DlvmBackward",
    request=Schema(
        (
            ScalarSpec("epoch", int, low=0, what="backward epoch"),
            # the party checks both against its round
            TensorSpec(
                "log_lik_grad",
                "float32",
                (None, None),
                optional=True,
                what="log-likelihood gradient",
            ),
            TensorSpec(
                "expert_grad", "float32", (None, EXPERT), optional=True, what="expert gradient"
            ),
        ),
        what="backward",
    ),
    reply=Schema(),
    handler=backward,
    phase="backward",
    pack_call=_pack_backward,
    unpack_call=_unpack_backward,
)


# ------------------------------------------------------------------------------- LabelledRows
def labelled_rows(party: PartyPort, call: LabelledRowsCall) -> np.ndarray:
    if call.split != "train":
        raise ProtocolError(f"labelled rows: only of the train split, not {call.split!r}")
    return _roles(party).labelled_rows()


def _labelled_reply(call: LabelledRowsCall, rows: np.ndarray) -> None:
    if rows.size and (rows.max() >= call.samples or (np.diff(rows) <= 0).any()):
        raise ProtocolError(f"labelled rows: not ascending distinct rows below {call.samples}")


LABELLED_ROWS = StepSpec(
    name="LabelledRows",
    request=Schema((ScalarSpec("samples", int, low=0, what="labelled rows samples"),), split=True),
    reply=Schema((TensorSpec("rows", INDEX, ("N",), what="labelled rows"),)),
    handler=labelled_rows,
    call_type=LabelledRowsCall,
    phase="align",
    check_reply=_labelled_reply,
)

STEPS = (DECODE, STEP, PREDICT, BACKWARD, LABELLED_ROWS)
