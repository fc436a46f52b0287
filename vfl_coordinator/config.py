"""The coordinator's configuration: where it listens, whom it waits for, its deadlines."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vfl_core.config import TrainConfig
from vfl_core.training.faults import FaultConfig, check_faults


class Deadlines(BaseModel):
    """Seconds each phase waits for a party; a party that misses one is left out of that phase."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    embed: float = Field(10.0, gt=0)
    fuse: float = Field(10.0, gt=0)
    backward: float = Field(10.0, gt=0)
    predict: float = Field(10.0, gt=0)
    align: float = Field(60.0, gt=0)
    shutdown: float = Field(2.0, gt=0)
    checkpoint: float = Field(30.0, gt=0)

    def seconds(self, rpc: str, *, training: bool = True, points: int = 0) -> float:
        """How long a call of `rpc` to one party may take: its phase's deadline (inference calls
        of a training phase take Predict's), plus `points` times PSI_S_PER_POINT for the PSI
        steps, which take time in proportion to the points they carry. The one place that maps
        a call to a deadline."""
        phase = _PHASE[rpc] if training else _INFERENCE_PHASE.get(rpc, _PHASE[rpc])
        extra = PSI_S_PER_POINT * points if rpc in _PSI_RPCS else 0.0
        return float(getattr(self, phase)) + extra

    def pipelined(self, embeds: int, fuses: int, backwards: int) -> float:
        """A pipelined Train call carrying these phases: their deadlines added up."""
        return embeds * self.embed + fuses * self.fuse + backwards * self.backward


# PSI steps take time in proportion to the points (~0.1 ms each on a loaded 2-core machine): the
# align deadline plus this much per point.
PSI_S_PER_POINT = 1e-3
_PSI_RPCS = frozenset({"PsiBlind", "PsiApply", "PsiKeys"})

# The phase whose deadline each party RPC has. Decoupled VFL: a guest step has the Embed
# deadline, a host step Backward's (it trains), host outputs Embed's (the owner's transfer), the
# owner Fuse's. Latent-variable VFL: Decode and Step take the Fuse deadline, Backward Backward's.
_PHASE = {
    "IdHashes": "align",
    "ClassWeights": "align",
    "LabelledRows": "align",
    "PsiBlind": "align",
    "PsiApply": "align",
    "PsiKeys": "align",
    "Embed": "embed",
    "Fuse": "fuse",
    "Backward": "backward",
    "Predict": "predict",
    "Score": "predict",
    "Checkpoint": "checkpoint",
    "Shutdown": "shutdown",
    "GuestStep": "embed",
    "HostStep": "backward",
    "HostOutput": "embed",
    "OwnerFeed": "fuse",
    "OwnerTrain": "fuse",
    "DlvmDecode": "fuse",
    "DlvmStep": "fuse",
    "DlvmPredict": "predict",
    "DlvmBackward": "backward",
}
# Calls of a training phase made at inference (a caller is waiting): Predict's deadline.
_INFERENCE_PHASE = {"HostOutput": "predict", "DlvmDecode": "predict"}


class CoordinatorConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    listen: str = "0.0.0.0:50051"
    clients: int = Field(4, ge=1)
    quorum: int | None = Field(None, ge=1)  # start with this many after register_timeout_s
    register_timeout_s: float = Field(300.0, gt=0)
    # training pauses while no label party is up, for at most this long (vfl_core.training.engine)
    rejoin_timeout_s: float = Field(300.0, gt=0)
    # while it pauses, the down parties are called anyway this often (a thawed one answers)
    pause_probe_s: float = Field(5.0, gt=0)
    # alignment asks a party that holds samples but does not answer again for this long
    align_retry_s: float = Field(60.0, ge=0)
    # After the run, how long a party that missed its end (down, or restarting as it ended) may
    # take to register again and be told; 0: do not wait (vfl_coordinator.runner._farewell)
    farewell_s: float = Field(10.0, ge=0)
    down_after: int = Field(3, ge=1)
    retry_every: int = Field(10, ge=1)
    deadlines: Deadlines = Deadlines()
    out: Path = Path("runs/coordinator")
    serve: bool = False  # after training, keep serving Predict/Evaluate until stopped
    run_id: str | None = None
    audit_log: Path | None = None  # append every message to and from the coordinator here
    # security (vfl_wire.security, vfl_coordinator.admission; README "Security")
    tls_dir: Path | None = Path("certs")  # `vfl certs` output or its coordinator/ part
    insecure: bool = False  # plaintext gRPC: no certificates, no tokens
    parties: dict[str, list[int] | None] | None = None  # admitted party -> blocks (None: any)
    alignment: Literal["psi", "hmac"] = (
        "psi"  # vfl_core.training.psi, or the parties' keyed ID hashes
    )
    max_inflight: int = Field(8, ge=1)  # calls in flight per peer before RESOURCE_EXHAUSTED
    # checkpoints (vfl_coordinator.checkpoints): the coordinator's own, and when parties save
    checkpoint_dir: Path | None = None  # resume from here if it holds a checkpoint of this run
    checkpoint_every: int = Field(0, ge=0)  # rounds between checkpoints; 0: only at the end
    eval_every: int = Field(0, ge=0)
    # vfl_core.training.pipeline (a round's Backward travels with the next Embed); False: the
    # sequential
    # engine's three calls per round (same results, one more round trip per round)
    pipeline: bool = True  # epochs between test evaluations in epochs.jsonl; 0: none
    # injected guest loss and lost messages during training (vfl_core.training.faults): rehearsal
    # only
    faults: FaultConfig = FaultConfig()
    train: TrainConfig = TrainConfig()

    @model_validator(mode="after")
    def _faults_fit_method(self) -> CoordinatorConfig:
        check_faults(self.faults, self.train.method)
        if self.train.encrypt_relay and self.insecure:
            raise ValueError(
                "--encrypt-relay needs TLS certificates (each party signs its relay key with "
                "its certificate): drop --insecure and pass --tls-dir"
            )
        if self.faults.active and self.train.data_plane == "direct":
            raise ValueError(
                "injected faults (--fault-rate, --link-loss) act on the relay's calls: drop "
                "them or --data-plane direct"
            )
        return self
