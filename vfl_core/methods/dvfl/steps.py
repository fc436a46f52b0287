"""The steps of Decoupled VFL on the generic Step: their schemas and what a party does in each.

Activations and codes go down the tiers only (guest -> coordinator -> host registers, host ->
coordinator -> owner); nothing travels back up, and no step carries a label. Symbols: B the
batch (rows or sample keys), guest_dim and host_dim the codes' widths (the run's DvflConfig).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vfl_core.errors import ProtocolError
from vfl_core.methods.dvfl.messages import (
    GuestCall,
    GuestResult,
    HostCall,
    HostOutputCall,
    HostResult,
    OwnerFeedCall,
    OwnerTrainCall,
)
from vfl_core.methods.record import Record, StepHeader
from vfl_core.methods.schema import BATCH, INDEX, ScalarSpec, Schema, TensorSpec
from vfl_core.methods.steps import StepSpec

if TYPE_CHECKING:
    from vfl_core.methods.dvfl.roles import DvflRoles
    from vfl_core.methods.party_port import PartyPort
    from vfl_core.methods.spec import RunConfig

MAX_REPLAY_STEPS = 1000  # DvflConfig.host_steps' bound
GUEST, HOST = "guest_dim", "host_dim"


def dims(config: RunConfig) -> dict[str, int]:
    return {GUEST: config.dvfl.guest_dim, HOST: config.dvfl.host_dim}


def _roles(party: PartyPort) -> DvflRoles:
    roles = party.dvfl
    if roles is None:
        raise ProtocolError(f"party {party.party_id} trains {party.config.method}, not dvfl")
    return roles


def _advance(party: PartyPort, round_id: int, result: Any) -> Any:
    party.last_round = max(party.last_round, round_id)
    return result


# ---------------------------------------------------------------------------------- GuestStep
def guest_step(party: PartyPort, call: GuestCall) -> GuestResult:
    """One local autoencoder step of the party's guest (and its activations on a write)."""
    return _advance(party, call.round_id, _roles(party).guest_step(call))


def _guest_reply(call: GuestCall, result: GuestResult) -> None:
    if (result.activations is not None) != call.write:
        raise ProtocolError(f"guest activations: {'missing' if call.write else 'not asked for'}")


GUEST_STEP = StepSpec(
    name="GuestStep",
    request=Schema(
        (ScalarSpec("epoch", int, low=0, what="guest epoch"), ScalarSpec("write", bool)),
        rows="required",
        what="guest",
    ),
    reply=Schema(
        (
            ScalarSpec("loss", float, what="guest loss"),
            TensorSpec(
                "activations", "float32", (BATCH, GUEST), optional=True, what="guest activations"
            ),
        )
    ),
    handler=guest_step,
    call_type=GuestCall,
    result_type=GuestResult,
    phase="embed",
    check_reply=_guest_reply,
)


# ----------------------------------------------------------------------------------- HostStep
def host_step(party: PartyPort, call: HostCall) -> HostResult:
    """Write the guests' activations into the host's registers, then replay them."""
    return _advance(party, call.round_id, _roles(party).host_step(call))


def _writes_need_index(_header: StepHeader | None, record: Record) -> None:
    index = record.tensors.get("index")
    if record.maps.get("writes") and (index is None or not len(index)):
        raise ProtocolError("host writes: activations without sample indices")


def _host_reply(call: HostCall, result: HostResult) -> None:
    if not 0 <= result.replayed <= call.steps:
        raise ProtocolError(f"host replayed: {result.replayed} outside 0..{call.steps}")


HOST_STEP = StepSpec(
    name="HostStep",
    request=Schema(
        (
            ScalarSpec("epoch", int, low=0, what="host epoch"),
            # checked against the register cap by the host before anything is allocated
            ScalarSpec("samples", int, low=1, what="host samples"),
            TensorSpec("index", INDEX, (BATCH,), what="host index"),
            TensorSpec("writes", "float32", (BATCH, GUEST), keyed=True, what="write"),
            ScalarSpec("steps", int, low=0, high=MAX_REPLAY_STEPS, what="host steps"),
        ),
        what="host",
        rules=(_writes_need_index,),
    ),
    reply=Schema(
        (
            ScalarSpec("loss", float, what="host loss"),
            ScalarSpec("replayed", int, low=0, what="host replayed"),
        )
    ),
    handler=host_step,
    call_type=HostCall,
    result_type=HostResult,
    phase="backward",  # it trains
    check_reply=_host_reply,
)


# --------------------------------------------------------------------------------- HostOutput
def host_output(party: PartyPort, call: HostOutputCall) -> np.ndarray:
    """(B, host_dim): the frozen host's code of its registers or of fresh activations."""
    party.split(call.split)
    return _roles(party).host_output(call)


def _registers_or_activations(_header: StepHeader | None, record: Record) -> None:
    if record.scalars.get("from_registers") and record.maps.get("activations"):
        raise ProtocolError("host output: activations sent with from_registers")


HOST_OUTPUT = StepSpec(
    name="HostOutput",
    request=Schema(
        (
            TensorSpec("index", INDEX, (BATCH,), what="host output index"),
            ScalarSpec("from_registers", bool),
            TensorSpec("activations", "float32", (BATCH, GUEST), keyed=True, what="activation"),
        ),
        split=True,
        what="host output",
        rules=(_registers_or_activations,),
    ),
    reply=Schema((TensorSpec("outputs", "float32", (BATCH, HOST), what="host outputs"),)),
    handler=host_output,
    call_type=HostOutputCall,
    round_attr="request_id",
    phase="embed",  # the owner's transfer; at inference Predict's
    training=lambda call: call.from_registers,
)


# ---------------------------------------------------------------------------------- OwnerFeed
def owner_feed(party: PartyPort, call: OwnerFeedCall) -> None:
    """Keep the hosts' codes of the owner's rows it has labels for."""
    _roles(party).owner_feed(call)
    party.last_round = max(party.last_round, call.round_id)


OWNER_FEED = StepSpec(
    name="OwnerFeed",
    request=Schema(
        (TensorSpec("outputs", "float32", (BATCH, HOST), keyed=True, what="host output"),),
        rows="required",
        what="owner",
    ),
    reply=Schema(),
    handler=owner_feed,
    call_type=OwnerFeedCall,
    phase="fuse",
)


# --------------------------------------------------------------------------------- OwnerTrain
def owner_train(party: PartyPort, call: OwnerTrainCall) -> float:
    """One epoch of the owner's classifier; its mean loss."""
    return _advance(party, call.round_id, _roles(party).owner_train(call))


OWNER_TRAIN = StepSpec(
    name="OwnerTrain",
    request=Schema((ScalarSpec("epoch", int, low=0, what="owner epoch"),), what="owner"),
    reply=Schema((ScalarSpec("loss", float, what="owner loss"),)),
    handler=owner_train,
    call_type=OwnerTrainCall,
    phase="fuse",
)

STEPS = (GUEST_STEP, HOST_STEP, HOST_OUTPUT, OWNER_FEED, OWNER_TRAIN)
