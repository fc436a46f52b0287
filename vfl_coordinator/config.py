"""The coordinator's configuration: where it listens, whom it waits for, its deadlines."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from vfl_core.config import TrainConfig


class Deadlines(BaseModel):
    """Seconds each phase waits for a party; a party that misses one is left out of that phase."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    embed: float = Field(10.0, gt=0)
    fuse: float = Field(10.0, gt=0)
    backward: float = Field(10.0, gt=0)
    predict: float = Field(10.0, gt=0)
    align: float = Field(60.0, gt=0)
    shutdown: float = Field(2.0, gt=0)


class CoordinatorConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    listen: str = "0.0.0.0:50051"
    clients: int = Field(4, ge=1)
    quorum: int | None = Field(None, ge=1)  # start with this many after register_timeout_s
    register_timeout_s: float = Field(300.0, gt=0)
    down_after: int = Field(3, ge=1)
    retry_every: int = Field(10, ge=1)
    deadlines: Deadlines = Deadlines()
    out: Path = Path("runs/coordinator")
    serve: bool = False  # after training, keep serving Predict/Evaluate until stopped
    run_id: str | None = None
    audit_log: Path | None = None  # append every message to and from the coordinator here
    train: TrainConfig = TrainConfig()
