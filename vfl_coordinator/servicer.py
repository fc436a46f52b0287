"""The `Coordinator` gRPC service: registration, status, evaluation and prediction requests.

It translates messages and delegates: registration to the Registry, evaluation and prediction to
the round engine (vfl_core.training.engine.Federation) once training is over.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import unquote

import numpy as np

from vfl_coordinator.admission import Admission
from vfl_coordinator.registry import Registry
from vfl_coordinator.serving_record import ServingRecord
from vfl_core.errors import ConfigError, ProtocolError
from vfl_core.inference.metrics import EvalReport
from vfl_core.lifecycle import evaluate_waiting
from vfl_core.protocol import PartyInfo, Registration
from vfl_core.serving import predict_waiting, refuse_unanswered
from vfl_core.training.cut_short import heads_left, no_head_answered
from vfl_core.training.engine import Federation
from vfl_wire import convert
from vfl_wire.security import current_peer
from vfl_wire.status import rpc_errors
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

log = logging.getLogger(__name__)

ANSWER_MARGIN_S = 5.0  # of a caller's deadline, kept to answer after waiting for a rejoin

# Bounds on what one Predict request may ask for, so a caller cannot tie up the coordinator.
MAX_PREDICT_IDS = 100_000


@dataclass
class CoordinatorState:
    registry: Registry
    run_id: str
    config_json: str
    phase: str = "registering"
    federation: Federation | None = None
    epoch: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    admission: Admission | None = None  # who may register (vfl_coordinator.admission)
    # this process's name for the parties (new at every start) and its last checkpoint's round
    session: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    resume_round: int = -1
    record: ServingRecord | None = None  # the serving phase, kept in results.json
    rejoin_timeout_s: float = 0.0  # how long Evaluate/Predict wait for a label party
    interrupt: str | None = None  # a signal received in training, acted on after the round
    # block -> the party's signed relay key (vfl_wire.relay_keys), passed on to the others with
    # every call that carries sealed tensors when the run encrypts its relay
    relay_keys: dict[int, vfl_pb2.RelayKey] = field(default_factory=dict)

    def relay_key_list(self) -> list[vfl_pb2.RelayKey]:
        return [self.relay_keys[b] for b in sorted(self.relay_keys)]

    def ready_federation(self) -> Federation:
        if self.federation is None or self.phase not in ("serving", "done"):
            raise ConfigError(
                f"the federation is {self.phase}; predictions are served after training"
            )
        return self.federation


class CoordinatorServicer(vfl_pb2_grpc.CoordinatorServicer):
    def __init__(self, state: CoordinatorState) -> None:
        self.state = state

    def _wait_s(self, context) -> float:
        """How long a call waits for a label party to come back: the rejoin timeout, within
        what is left of the caller's deadline (a few seconds kept to answer)."""
        left = context.time_remaining()
        room = float("inf") if left is None else max(0.0, left - ANSWER_MARGIN_S)
        return min(self.state.rejoin_timeout_s, room)

    def Register(self, request, context):
        with rpc_errors(context, "Register"):
            convert.check_header(request.header, run_id=None, party_id=None)
            info, address = convert.register_request_from_proto(request)
            if self.state.admission is not None:  # bound to the certificate: no acting for others
                self.state.admission.check(info, request.header.party_id, current_peer())
            if not address or address.startswith((":", "0.0.0.0:", "[::]:")):
                address = _peer_address(context.peer(), address)
            s = self.state
            synced = convert.register_session_from_proto(request) == s.session
            lease = convert.register_lease_from_proto(request)
            if synced:
                _check_trained(s, info, convert.register_last_round_from_proto(request))
            message, lease = s.registry.register(info, address, synced, lease)
            if request.HasField("relay_key"):
                s.relay_keys[info.block] = convert.relay_key_from_proto(request.relay_key, info)
            reply = Registration(s.run_id, s.config_json, message, s.session, s.resume_round, lease)
            return convert.registration_to_proto(reply)

    def Status(self, request, context):
        with rpc_errors(context, "Status"):
            s = self.state
            reply = vfl_pb2.StatusReply(state=s.phase, epoch=s.epoch)
            fed = s.federation
            if fed is not None:
                reply.round_id = fed.round_id
            for block, member in s.registry.members().items():
                live = fed.liveness if fed is not None else None
                reply.parties.add(
                    party_id=member.info.party_id,
                    block=block,
                    state=live.state.get(block, "up") if live else "registered",
                    missed_rounds=live.missed.get(block, 0) if live else 0,
                    generation=member.generation,
                )
            return reply

    def Evaluate(self, request, context):
        with rpc_errors(context, "Evaluate"):
            convert.check_header(request.header, run_id=None, party_id=None)
            split = convert.check_split(request.split or "test")
            start = time.perf_counter()
            with self.state.lock:
                fed = self.state.ready_federation()
                fed.align_again_if_due("serving")  # a party back on other rows, or late
                _check_split_known(fed, split)
                wait_s = self._wait_s(context)
                report = evaluate_waiting(fed, split, wait_s, "the evaluation")
                if self.state.record is not None:
                    self.state.record.evaluated(fed, split, report)
                _refuse_partial(fed, report, wait_s)
            seconds = time.perf_counter() - start
            # live: answered every batch that held its samples, not merely up at the end
            return convert.eval_report_to_proto(
                report.rows(), report.unscored, report.live_blocks(), seconds, report.answers
            )

    def Predict(self, request, context):
        with rpc_errors(context, "Predict"):
            convert.check_header(request.header, run_id=None, party_id=None)
            split = convert.check_split(request.split or "test")
            with self.state.lock:
                fed = self.state.ready_federation()
                fed.align_again_if_due("serving")  # a party back on other rows, or late
                _check_split_known(fed, split)
                if not request.all_rows and fed.alignment == "psi":
                    raise ConfigError(
                        "this federation aligned its samples by PSI: the coordinator knows no ID "
                        "hashes; predict all rows, or run the coordinator with --alignment hmac"
                    )
                index = (
                    None if request.all_rows else _key_index(fed, split, list(request.id_hashes))
                )
                wait_s = self._wait_s(context)
                samples, live = predict_waiting(fed, split, index, wait_s)
                if self.state.record is not None:
                    self.state.record.predicted(fed, split, len(samples), live)
                refuse_unanswered(samples, wait_s)
            return vfl_pb2.FederatedPredictReply(
                rows=[convert.prediction_to_proto(p) for p in samples]
            )


def _refuse_partial(fed: Federation, report: EvalReport, wait_s: float) -> None:
    """An evaluation without any label party's answer, or cut short by every one of them going
    away, is no result: refused (FAILED_PRECONDITION) naming what was scored, once the wait
    for a rejoin is over."""
    total = report.scored + report.unscored
    if no_head_answered(fed, report):
        raise ConfigError(
            f"the evaluation scored no sample of {total}: no label party answered within "
            f"{wait_s:.0f}s"
        )
    if heads_left(fed, report):
        raise ConfigError(
            f"the evaluation scored {report.scored} of {total} samples: every label party "
            f"stopped answering during it, and none answered a whole one within {wait_s:.0f}s"
        )


def _check_trained(state: CoordinatorState, info: PartyInfo, last_round: int | None) -> None:
    """Once training has ended, a party process with initial weights (restarted without the
    checkpoints it trained with) would answer predictions at random: refuse it, so it stops
    with this message and the others predict without it."""
    trained = state.federation is not None and state.federation.round_id > 0  # not --epochs 0
    if state.phase in ("serving", "done") and trained and last_round == -1:
        raise ConfigError(
            f"run {state.run_id} has finished training, and party {info.party_id} (block "
            f"{info.block}) holds initial weights: it restored no checkpoint of this run, so its "
            "predictions would be random. Restart it with the --checkpoint-dir it trained with"
        )


def _check_split_known(fed: Federation, split: str) -> None:
    if split not in fed.alignments:
        raise ProtocolError(f"no party holds a '{split}' split")


def _key_index(fed: Federation, split: str, hashes: list[bytes]) -> np.ndarray:
    if len(hashes) > MAX_PREDICT_IDS:
        raise ProtocolError(f"predict: {len(hashes)} IDs requested, at most {MAX_PREDICT_IDS}")
    position = {key: i for i, key in enumerate(fed.alignments[split].keys)}
    return np.array(sorted({position[h] for h in hashes if h in position}), dtype=np.int64)


def _peer_address(peer: str, advertised: str) -> str:
    """host:port where the coordinator reaches a party that registered without a routable
    host: the peer's IP address plus the port the party listens on."""
    port = advertised.rsplit(":", 1)[-1] if advertised else ""
    kind, _, rest = peer.partition(":")
    rest = unquote(rest)  # gRPC writes an IPv6 peer as ipv6:%5B::1%5D:port
    host = rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        host = host if host.startswith("[") else f"[{host}]"
    if not port:
        raise ProtocolError("register: the party's address has no port")
    return f"{host}:{port}"
