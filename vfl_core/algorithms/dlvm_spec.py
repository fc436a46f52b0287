"""The latent-variable VFL as a method spec (vfl_core.algorithms.methods registers it): its own
round program.

The spec's data fields describe what reports and the demo ask of a method: one predictor, the
active party (the lowest label block) with its classifier p(y | h); the rounds themselves are
`vfl_core.algorithms.dlvm_program`'s. This module imports only the spec types (the registry imports
it
before the engine exists); the program's per-run state lives in `Federation.program_state`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from vfl_core.algorithms.method_spec import HeadTask, MethodSpec, ProgramHooks, TaskContext

if TYPE_CHECKING:
    from vfl_core.algorithms.dlvm import DlvmRoles
    from vfl_core.algorithms.dlvm_program import DlvmProgram
    from vfl_core.config import TrainConfig
    from vfl_core.training.alignment import Batch
    from vfl_core.training.engine import Federation, PredictionBatch, RoundRecord
    from vfl_core.training.party import Party


def no_fused_heads(c: TaskContext) -> list[HeadTask]:
    """DLVM trains no head on fused embeddings (its experts meet in a posterior instead)."""
    return []


class DlvmRounds(ProgramHooks):
    """The engine's entry into a run's DlvmProgram."""

    def run(self, fed: Federation) -> DlvmProgram:
        if fed.program_state is None:
            from vfl_core.algorithms.dlvm_program import DlvmProgram  # the program needs the engine

            fed.program_state = DlvmProgram(fed)
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
        return config.epochs + config.dlvm.stage2_epochs  # stage 1, then stage 2

    def plan(self, fed: Federation, epoch: int) -> list[Batch] | None:
        return self.run(fed).plan(epoch)

    def party_state(self, party: Party) -> DlvmRoles:
        from vfl_core.algorithms.dlvm import DlvmRoles  # the networks need torch

        return DlvmRoles(party)

    def embed_width(self, fed: Federation) -> int | None:
        return 2 * fed.config.dlvm.latent_dim  # an expert: [mean | log-variance]

    def stats(self, fed: Federation) -> dict[str, object] | None:
        return self.run(fed).stats()

    def state(self, fed: Federation) -> dict[str, object]:
        return self.run(fed).state()

    def load_state(self, fed: Federation, saved: dict) -> None:
        self.run(fed).load_state(saved)


DLVM_SPEC = MethodSpec(
    name="dlvm",
    display_name="DLVM-VFL",
    fusion="mean",  # unused: the experts meet in the product-of-experts posterior
    slots="shared",
    heads="active_party",  # the classifier p(y | h) at the lowest label block
    tasks=no_fused_heads,
    combination="heads",
    replacement="nothing",  # a party that misses a phase is a missing block of the posterior
    unlabelled_rows=True,  # stage 1 learns from every training sample, labelled or not
    program=DlvmRounds(),
)
