"""Decoupled VFL as a method spec (vfl_core.algorithms.methods registers it): its own round program.

The spec's data fields describe what reports and the demo ask of a method: one predictor, the
label owner (the active party); the rounds themselves are `vfl_core.algorithms.dvfl_program`'s. This
module
imports only the spec types (the registry imports it before the engine exists); the program's
per-run state lives in `Federation.program_state`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from vfl_core.algorithms.method_spec import HeadTask, MethodSpec, ProgramHooks, TaskContext

if TYPE_CHECKING:
    from vfl_core.algorithms.dvfl_program import DvflProgram
    from vfl_core.algorithms.dvfl_roles import DvflRoles
    from vfl_core.config import TrainConfig
    from vfl_core.training.alignment import Batch
    from vfl_core.training.engine import Federation, PredictionBatch, RoundRecord
    from vfl_core.training.party import Party


def no_head_tasks(c: TaskContext) -> list[HeadTask]:
    """DVFL trains no head on fused embeddings (its tiers have objectives of their own)."""
    return []


class DvflRounds(ProgramHooks):
    """The engine's entry into a run's DvflProgram."""

    def run(self, fed: Federation) -> DvflProgram:
        if fed.program_state is None:
            from vfl_core.algorithms.dvfl_program import DvflProgram  # the program needs the engine

            fed.program_state = DvflProgram(fed)
        return fed.program_state

    def train_round(self, fed: Federation, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
        return self.run(fed).run_round(round_id, epoch, batch)

    def predict_batch(
        self,
        fed: Federation,
        split: str,
        batch: Batch,
        request: int,
        blocks: Collection[int] | None,
    ) -> PredictionBatch:
        return self.run(fed).predict_batch(split, batch, request, blocks)

    def epochs(self, config: TrainConfig) -> int:
        return config.epochs + config.dvfl.owner_epochs

    def plan(self, fed: Federation, epoch: int) -> list[Batch] | None:
        return self.run(fed).plan(epoch)

    def party_state(self, party: Party) -> DvflRoles:
        from vfl_core.algorithms.dvfl_roles import DvflRoles  # the tiers' models need torch

        return DvflRoles(party)

    def embed_width(self, fed: Federation) -> int | None:
        return fed.config.dvfl.guest_dim

    def rejoined(self, fed: Federation, block: int) -> bool:
        self.run(fed).rejoined(block)
        return True

    def stats(self, fed: Federation) -> dict[str, object] | None:
        return self.run(fed).stats()

    def state(self, fed: Federation) -> dict[str, object]:
        return self.run(fed).state()

    def load_state(self, fed: Federation, saved: dict) -> None:
        self.run(fed).load_state(saved)


DVFL_SPEC = MethodSpec(
    name="dvfl",
    display_name="DVFL",
    fusion="concat",  # the owner concatenates the hosts' codes
    slots="shared",
    heads="active_party",  # the label owner: the lowest label block
    tasks=no_head_tasks,
    combination="heads",
    replacement="nothing",
    unlabelled_rows=True,  # the guests' and hosts' autoencoders need no labels
    program=DvflRounds(),
)
