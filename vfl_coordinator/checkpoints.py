"""The coordinator's checkpoints: when the federation saves, what the coordinator keeps, and how a
restarted coordinator resumes.

Every `checkpoint_every` rounds (and at the end of training) the round engine asks every party
not marked down to save its state after that round (`Transport.checkpoint`), then calls
`Checkpointer`, which writes <dir>/coordinator-round-<r>.pt atomically: the run id, the engine's
snapshot (next round, epoch, position in the epoch's plan, request counter, liveness, epoch
summaries), the membership, which parties saved, the history of resumes, and the full
coordinator config; the TrainConfig is what the checkpoint is checked against.

A coordinator started with a checkpoint dir that holds a checkpoint of this run and training
config resumes from the newest one: same run id, next round r + 1, the epoch's plan (a pure
function of seed and epoch) without its first `position` batches. Parties learn r from their
registration replies and roll back to their own checkpoint of r (vfl_client.host). A checkpoint
of another run id (--run-id), training config or number of parties is refused.
"""

from __future__ import annotations

import importlib
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from vfl_coordinator.config import CoordinatorConfig
from vfl_coordinator.servicer import CoordinatorState
from vfl_core.errors import ConfigError, DataError
from vfl_core.persistence.checkpoint import load_checkpoint
from vfl_core.persistence.checkpoint_store import RoundCheckpoints
from vfl_core.persistence.run_log import reopen
from vfl_core.training.engine import Federation, Observer

log = logging.getLogger(__name__)

NAME = "coordinator"  # files <dir>/coordinator-round-<r>.pt


@dataclass(frozen=True)
class Resume:
    run_id: str
    round: int  # the last round the checkpoint contains
    engine: dict  # Federation.snapshot()
    history: list[dict]  # earlier resumes of this run


def load_resume(config: CoordinatorConfig) -> Resume | None:
    """The newest checkpoint of this run and config in `config.checkpoint_dir`, or None."""
    if config.checkpoint_dir is None:
        return None
    store = RoundCheckpoints(config.checkpoint_dir, NAME)
    store.clean_temporaries()  # of a coordinator killed while writing
    rounds = store.rounds()
    if not rounds:
        return None
    run_id = config.run_id or _newest_run_id(store, rounds)
    payload = store.latest(run_id, config.train.model_dump_json())
    if payload is None:
        return None
    meta, state = payload["meta"], payload["state"]
    if meta.get("clients") != config.clients:
        raise ConfigError(
            f"{store.path(meta['round'])} was written for {meta.get('clients')} parties, "
            f"not {config.clients}"
        )
    log.info("resuming run %s from its checkpoint of round %d", run_id, meta["round"])
    return Resume(run_id, int(meta["round"]), state["engine"], list(state["resumed"]))


def _newest_run_id(store: RoundCheckpoints, rounds: list[int]) -> str:
    """The run id of the newest readable checkpoint (to resume without --run-id)."""
    for r in reversed(rounds):
        try:
            return str(load_checkpoint(store.path(r), None)["meta"].get("run_id"))
        except DataError as err:
            log.warning("skipping unreadable checkpoint: %s", err)
    raise DataError(f"no readable coordinator checkpoint in {store.directory}")


def warm_up_writer() -> threading.Thread:
    """Import the checkpoint writer's torch on a thread, now: the coordinator starts without
    torch (tests/test_light_imports.py), and a checkpoint written by the round engine is on
    every party's critical path, so the first one would hold the whole federation for the
    import (about 1.5 CPU s; several seconds on a loaded machine). Started before alignment,
    the import overlaps it; a checkpoint taken before it ends waits for it (the import lock)."""
    thread = threading.Thread(
        target=importlib.import_module, args=("torch",), name="torch-warm-up", daemon=True
    )
    thread.start()
    return thread


class Checkpointer(Observer):
    """Writes the coordinator's checkpoint once the parties have saved theirs (the engine, given
    checkpoint_every, tells its observers)."""

    def __init__(
        self, config: CoordinatorConfig, state: CoordinatorState, resume: Resume | None
    ) -> None:
        assert config.checkpoint_dir is not None
        self.config = config
        self.state = state
        self.store = RoundCheckpoints(config.checkpoint_dir, NAME)
        self.history = list(resume.history) if resume is not None else []
        self.warm = warm_up_writer()

    def resumed(self, fed: Federation, resume: Resume) -> None:
        """Continue `fed` (aligned) from `resume`; every registered party is present."""
        fed.restore(resume.engine, present=self.state.registry.members())
        self.state.epoch = fed.cursor.epoch
        self.history.append(
            {
                "round": fed.round_id,
                "epoch": fed.cursor.epoch,
                "position": fed.cursor.position,
                "session": self.state.session,
            }
        )
        log.info(
            "resumed at round %d: epoch %d, %d batches into its plan",
            fed.round_id,
            fed.cursor.epoch + 1,
            fed.cursor.position,
        )

    def checkpoint_done(self, fed: Federation, round_id: int, saved: set[int]) -> None:
        members = self.state.registry.members()
        state = {
            "engine": fed.snapshot(),
            "members": {str(b): m.info.party_id for b, m in members.items()},
            "saved": sorted(saved),
            "resumed": self.history,
        }
        meta = {
            "run_id": self.state.run_id,
            "clients": self.config.clients,
            "coordinator_config": self.config.model_dump_json(),
        }
        try:
            self.store.save(round_id, state, self.config.train.model_dump_json(), meta)
        except DataError as err:  # a full disk, say: losing a checkpoint must not stop training
            last = self.state.resume_round
            since = f"round {last}" if last >= 0 else "the start"
            log.error("%s; training goes on (a restarted coordinator resumes from %s)", err, since)
            return
        self.state.resume_round = round_id
        log.info("checkpoint of round %d written (parties saved: %s)", round_id, sorted(saved))


def open_rounds(path: Path, resume: Resume | None) -> IO[str]:
    """The round log, line-buffered: new, or on a resume cut back to the checkpoint's round (the
    rounds after it run again) and appended to."""
    if resume is None:
        return path.open("w", buffering=1)
    return reopen(path, "round", lambda r: r["round"] <= resume.round)
