"""The Coordinator service's messages: a party's self-description and registration, checkpoint
calls, evaluation reports and prediction rows (see `vfl_wire.convert`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from vfl_core.data.learning_task import CLASSIFICATION, TASKS
from vfl_core.errors import ProtocolError
from vfl_core.inference.metrics import ROW_METRICS, MetricRow
from vfl_core.protocol import PartyInfo, Registration, SamplePrediction
from vfl_wire.convert_fields import (
    MAX_NAME_CHARS,
    MAX_SPLITS,
    check_name,
    check_round,
    clip,
    decode_map,
    require,
)
from vfl_wire.tensors import decode_array, encode_array
from vfl_wire.v1 import vfl_pb2


def party_info_to_proto(info: PartyInfo) -> vfl_pb2.PartyInfoMsg:
    return vfl_pb2.PartyInfoMsg(
        party_id=info.party_id,
        block=info.block,
        num_blocks=info.num_blocks,
        dataset=info.dataset,
        feature_shape=info.feature_shape,
        num_classes=info.num_classes,
        has_labels=info.has_labels,
        samples=info.samples,
        protocol_version=info.protocol_version,
        task=info.task,
        label_only=info.label_only,
    )


def party_info_from_proto(msg: vfl_pb2.PartyInfoMsg) -> PartyInfo:
    """Check the self-description for internal consistency; the coordinator checks the rest."""
    if not msg.party_id:
        raise ProtocolError("party info: empty party id")
    check_name(msg.party_id, "party info: party id")
    check_name(msg.dataset or "-", f"party info {msg.party_id!r}: data set")
    if msg.num_blocks < 1 or not 0 <= msg.block < msg.num_blocks:
        raise ProtocolError(
            f"party info {msg.party_id!r}: block {msg.block} outside 0..{msg.num_blocks - 1}"
        )
    if not msg.feature_shape or min(msg.feature_shape) < 1:
        raise ProtocolError(
            f"party info {msg.party_id!r}: invalid feature shape {tuple(msg.feature_shape)}"
        )
    if msg.num_classes < 0:
        raise ProtocolError(f"party info {msg.party_id!r}: negative number of classes")
    task = msg.task or CLASSIFICATION  # parties of before tasks existed send none
    if task not in TASKS:
        raise ProtocolError(f"party info {msg.party_id!r}: unknown task {clip(msg.task)}")
    if len({*msg.samples, *msg.label_only}) > MAX_SPLITS:
        raise ProtocolError(f"party info {msg.party_id!r}: more than {MAX_SPLITS} splits")
    for split in {*msg.samples, *msg.label_only}:
        check_name(split, f"party info {msg.party_id!r}: split name")
    if any(n < 0 for n in msg.samples.values()):
        raise ProtocolError(f"party info {msg.party_id!r}: negative sample count")
    for split, n in msg.label_only.items():
        if not 0 <= n <= msg.samples.get(split, 0) or (n and not msg.has_labels):
            raise ProtocolError(
                f"party info {msg.party_id!r}: {n} label-only rows of split {split!r} do not "
                f"fit its {msg.samples.get(split, 0)} rows (or the party holds no labels)"
            )
    return PartyInfo(
        party_id=msg.party_id,
        block=msg.block,
        num_blocks=msg.num_blocks,
        dataset=msg.dataset,
        feature_shape=tuple(msg.feature_shape),
        num_classes=msg.num_classes,
        has_labels=msg.has_labels,
        samples=dict(sorted(msg.samples.items())),
        protocol_version=msg.protocol_version,
        task=task,
        label_only={s: n for s, n in sorted(msg.label_only.items()) if n},
    )


def register_request_to_proto(
    info: PartyInfo,
    address: str,
    h: vfl_pb2.Header,
    session: str = "",
    lease: str = "",
    last_round: int | None = None,
    relay_key: vfl_pb2.RelayKey | None = None,  # vfl_wire.relay_keys (parties with TLS)
) -> vfl_pb2.RegisterRequest:
    request = vfl_pb2.RegisterRequest(
        header=h, info=party_info_to_proto(info), address=address, session=session, lease=lease
    )
    if last_round is not None:
        request.last_round = last_round
    if relay_key is not None:
        request.relay_key.CopyFrom(relay_key)
    return request


def register_request_from_proto(req: vfl_pb2.RegisterRequest) -> tuple[PartyInfo, str]:
    """(the party's info, the address where it serves `Party`)."""
    require(req, "info", "register info")
    check_name(req.address, "register address")
    if len(req.session) > MAX_NAME_CHARS:
        raise ProtocolError(f"register session: {len(req.session)} characters, at most 128")
    return party_info_from_proto(req.info), req.address


MAX_RELAY_KEY_BYTES = 8192  # a relay key with its PEM certificate is about 1 kB


def relay_key_from_proto(key: vfl_pb2.RelayKey, info: PartyInfo) -> vfl_pb2.RelayKey:
    """A registering party's relay key, as the coordinator keeps it: of the party and block it
    registers and of a sane size. The coordinator cannot check more (the other parties check
    the signature, vfl_wire.relay_keys); it only passes it on."""
    if key.party_id != info.party_id or key.block != info.block:
        raise ProtocolError(
            f"register relay key: of {clip(key.party_id)} block {key.block}, not of the "
            f"registering {clip(info.party_id)} block {info.block}"
        )
    if key.ByteSize() > MAX_RELAY_KEY_BYTES:
        raise ProtocolError(f"register relay key: {key.ByteSize()} bytes, at most 8192")
    return key


def register_session_from_proto(req: vfl_pb2.RegisterRequest) -> str:
    """The coordinator session the registering party's state is synchronised with ("" none)."""
    return req.session


def register_last_round_from_proto(req: vfl_pb2.RegisterRequest) -> int | None:
    """The last training round the registering party's weights hold (-1: initial weights), or
    None if it does not say."""
    if not req.HasField("last_round"):
        return None
    if req.last_round < -1:
        raise ProtocolError(f"register last_round: {req.last_round}, expected -1 or more")
    return req.last_round


def register_lease_from_proto(req: vfl_pb2.RegisterRequest) -> str:
    """The lease the registering process holds ("" for a new process)."""
    if len(req.lease) > MAX_NAME_CHARS:
        raise ProtocolError(f"register lease: {len(req.lease)} characters, at most 128")
    return req.lease


def registration_to_proto(a: Registration) -> vfl_pb2.RegisterReply:
    reply = vfl_pb2.RegisterReply(
        run_id=a.run_id,
        config_json=a.config_json,
        message=a.message,
        session=a.session,
        lease=a.lease,
    )
    if a.resume_round >= 0:
        reply.resume_round = a.resume_round
    return reply


def registration_from_proto(reply: vfl_pb2.RegisterReply) -> Registration:
    if not reply.run_id or not reply.config_json:
        raise ProtocolError("register reply: missing run id or config")
    check_name(reply.run_id, "register reply: run id")
    resume = reply.resume_round if reply.HasField("resume_round") else -1
    if resume < -1:
        raise ProtocolError(f"register reply: negative resume round {resume}")
    if len(reply.lease) > MAX_NAME_CHARS:
        raise ProtocolError(f"register reply: lease of {len(reply.lease)} characters")
    return Registration(
        reply.run_id, reply.config_json, reply.message, reply.session, resume, reply.lease
    )


# What a Checkpoint call asks: write a checkpoint, or keep / restore an in-memory copy of the
# state (early stopping, vfl_core.training.early_stop).
_SNAPSHOTS = {
    "save": vfl_pb2.CheckpointRequest.SNAPSHOT_NONE,
    "keep": vfl_pb2.CheckpointRequest.SNAPSHOT_KEEP,
    "restore": vfl_pb2.CheckpointRequest.SNAPSHOT_RESTORE,
}


def checkpoint_call_to_proto(
    round_id: int, h: vfl_pb2.Header, kind: str = "save"
) -> vfl_pb2.CheckpointRequest:
    return vfl_pb2.CheckpointRequest(header=h, round_id=round_id, snapshot=_SNAPSHOTS[kind])


def checkpoint_call_from_proto(req: vfl_pb2.CheckpointRequest) -> int:
    if req.round_id < 0:
        raise ProtocolError(f"checkpoint round: negative value {req.round_id}")
    return req.round_id


def checkpoint_kind_from_proto(req: vfl_pb2.CheckpointRequest) -> str:
    """save, keep or restore; an unknown value (proto3 enums are open) is refused."""
    for kind, value in _SNAPSHOTS.items():
        if req.snapshot == value:
            return kind
    raise ProtocolError(f"checkpoint snapshot: unknown value {req.snapshot}")


def checkpoint_reply_to_proto(round_id: int, saved: bool) -> vfl_pb2.CheckpointReply:
    return vfl_pb2.CheckpointReply(round_id=round_id, saved=saved)


def checkpoint_reply_from_proto(reply: vfl_pb2.CheckpointReply, *, round_id: int) -> bool:
    """Whether the party saved its checkpoint of `round_id`."""
    check_round(reply.round_id, round_id, what="checkpoint reply")
    return reply.saved


def eval_report_to_proto(
    rows: Sequence[MetricRow],
    unscored: int,
    live_blocks: Sequence[int],
    seconds: float,
    answers: Mapping[int, Sequence[int]] | None = None,  # block -> (batches, answered)
) -> vfl_pb2.EvaluateReply:
    reply = vfl_pb2.EvaluateReply(unscored=unscored, live_blocks=live_blocks, seconds=seconds)
    for block, (batches, answered) in sorted((answers or {}).items()):
        reply.answers.add(block=block, batches=batches, answered=answered)
    for row in rows:
        # only the metrics of the task (the others are None and stay unset)
        metrics = {name: getattr(row, name) for name in ROW_METRICS}
        reply.rows.add(
            observed=row.observed,
            samples=row.samples,
            **{name: value for name, value in metrics.items() if value is not None},
        )
    return reply


def eval_answers_from_proto(reply: vfl_pb2.EvaluateReply) -> dict[int, tuple[int, int]]:
    """block -> (batches that held its samples, batches it answered)."""
    return {a.block: (a.batches, a.answered) for a in reply.answers}


def eval_rows_from_proto(reply: vfl_pb2.EvaluateReply) -> list[MetricRow]:
    return [
        MetricRow(
            observed=r.observed,
            samples=r.samples,
            **{name: getattr(r, name) for name in ROW_METRICS if r.HasField(name)},
        )
        for r in reply.rows
    ]


def prediction_to_proto(p: SamplePrediction) -> vfl_pb2.PredictionRow:
    row = vfl_pb2.PredictionRow(
        id_hash=p.id_hash,
        observed_blocks=p.observed,
        predicted_class=p.predicted_class,
        party_rows=p.rows,
    )
    for block, probs in p.party_probs.items():
        row.party_probabilities[block].CopyFrom(encode_array(probs, what="probabilities"))
    if p.federation is not None:
        row.federation_probabilities.CopyFrom(encode_array(p.federation, what="probabilities"))
    if p.predicted_value is not None:
        row.predicted_value = p.predicted_value
    return row


def prediction_from_proto(row: vfl_pb2.PredictionRow) -> SamplePrediction:
    federation = None
    if row.HasField("federation_probabilities"):
        federation = decode_array(
            row.federation_probabilities, what="federation probabilities", expect_dtype="float32"
        )
    return SamplePrediction(
        id_hash=row.id_hash,
        observed=tuple(row.observed_blocks),
        party_probs=decode_map(
            row.party_probabilities,
            lambda t, what: decode_array(t, what=what),
            "probabilities of block",
        ),
        federation=federation,
        predicted_class=row.predicted_class,
        predicted_value=row.predicted_value if row.HasField("predicted_value") else None,
        rows=_party_rows(row.party_rows),
    )


def _party_rows(rows: Mapping[int, int]) -> dict[int, int]:
    if any(b < 0 or r < 0 for b, r in rows.items()):
        raise ProtocolError("prediction row: negative block or row index")
    return dict(sorted(rows.items()))
