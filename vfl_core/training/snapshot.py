"""Where a run stands, as plain data, and how a restarted coordinator continues from it.

A snapshot taken after round r holds the next round (r + 1), the inference request counter, the
cursor (epoch, batches of the epoch's plan already run, the epoch's losses so far, finished epoch
summaries), the liveness state machine, the early-stopping record, the validation choice, the
pauses and a round program's state. Nothing else is needed to resume: the plan is a pure
function of (seed, epoch, alignment), task samples of (seed, round, party), and every party
rolls back to its own checkpoint of round r.

Part of the round engine (vfl_core.training.engine.Federation composes it); the coordinator's
checkpoint holds the snapshot (vfl_coordinator.checkpoints).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict
from typing import TYPE_CHECKING

from vfl_core.errors import ConfigError
from vfl_core.inference.choice import ValidationChoice
from vfl_core.methods.liveness import DOWN
from vfl_core.training.early_stop import EarlyStop
from vfl_core.training.records import Cursor, Pause, saved_summary

if TYPE_CHECKING:
    from vfl_core.training.ports import SnapshotRun

log = logging.getLogger(__name__)


class Snapshots:
    """Takes a run's snapshot and restores a run from one."""

    def __init__(self, fed: SnapshotRun) -> None:
        self.fed = fed

    def take(self) -> dict[str, object]:
        """Where the run stands, as plain data (the coordinator's checkpoint holds it)."""
        fed = self.fed
        c = fed.cursor
        return {
            "next_round": fed.round_id,
            "request_id": fed.request_id,
            "epoch": c.epoch,
            "position": c.position,
            "losses": [float(x) for x in c.losses],
            "head_losses": {int(k): [float(x) for x in v] for k, v in c.head_losses.items()},
            "incomplete": int(c.incomplete),
            "seconds": float(c.seconds),
            "summaries": [asdict(s) for s in c.summaries],
            "liveness": fed.liveness.to_state(),
            # the blocks in each split's alignment: the epoch's plan was made with these
            "aligned": {split: sorted(al.rows) for split, al in fed.alignments.items()},
            # a method's round program (dvfl: its hosts' liveness, transfer and byte counts)
            **({"program": fed.hooks.state(fed)} if fed.hooks is not None else {}),
            "early_stop": None if fed.early_stop is None else fed.early_stop.to_json(),
            # the pauses so far: a restarted coordinator's results.json lists them too
            "pauses": [asdict(p) for p in fed.pauses],
            "choice": fed.choice.to_json(),
        }

    def restore(self, saved: dict, present: Iterable[int]) -> None:
        """Continue (already aligned) from a snapshot (`take`). Parties in `present` that the
        snapshot had marked down registered again since: they are rejoining."""
        fed = self.fed
        epoch, position = int(saved["epoch"]), int(saved["position"])
        absent = self._absent_since(saved)
        cut = bool(absent) and epoch < fed.total_epochs and position > 0
        if cut:
            # The epoch's plan was made with these parties' samples, and this alignment lacks
            # them (silent while the coordinator aligned again): its rest cannot be told apart
            # from another plan, so the epoch ends here and the next starts without them, until
            # they are heard from again (`unaligned`).
            log.warning(
                "resuming without blocks %s, which did not answer the alignment: epoch %d ends "
                "at its %d batches so far",
                absent,
                epoch + 1,
                position,
            )
        elif epoch < fed.total_epochs and position > len(fed.plan(epoch)):
            raise ConfigError(
                f"checkpoint is {position} batches into epoch {epoch + 1}, whose plan has only "
                f"{len(fed.plan(epoch))}: the parties' data changed since"
            )
        fed.round_id = int(saved["next_round"])
        fed.request_id = int(saved["request_id"])
        fed.last_checkpoint = fed.round_id - 1
        fed.cursor = Cursor(
            epoch=epoch,
            position=position,
            losses=[float(x) for x in saved["losses"]],
            # older checkpoints lack the per-head split of the epoch's losses so far
            head_losses={int(k): list(v) for k, v in saved.get("head_losses", {}).items()},
            incomplete=int(saved["incomplete"]),
            seconds=float(saved["seconds"]),
            summaries=[saved_summary(s) for s in saved["summaries"]],
        )
        if fed.early_stop is not None and saved.get("early_stop"):
            fed.early_stop = EarlyStop.from_json(saved["early_stop"])  # the best epoch so far
        if saved.get("choice"):
            fed.choice = ValidationChoice.from_json(saved["choice"])
        if cut:
            fed.loop.end_epoch(epoch, position, fed.cursor.seconds)
        fed.liveness.load_state(saved["liveness"])
        fed.pauses = [Pause(**p) for p in saved.get("pauses", [])]  # older checkpoints: none
        if fed.hooks is not None and "program" in saved:
            fed.hooks.load_state(fed, saved["program"])
        for block in sorted(present):
            if fed.liveness.state.get(block) == DOWN:
                fed.liveness.rejoined(block, fed.tick)

    def _absent_since(self, saved: dict) -> list[int]:
        """Blocks of the snapshot's train alignment that this one lacks (older checkpoints do
        not say: none)."""
        before = saved.get("aligned", {}).get("train", [])
        now = self.fed.alignments["train"].rows if "train" in self.fed.alignments else {}
        return sorted(int(b) for b in before if int(b) not in now)
