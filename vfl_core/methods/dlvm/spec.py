"""The latent-variable VFL as a method spec (vfl_core.methods.registry registers it): its own
round program.

The spec's data fields describe what reports and the demo ask of a method: one predictor, the
active party (the lowest label block) with its classifier p(y | h); the rounds themselves are
`vfl_core.methods.dlvm.program`'s. This module imports only the spec types (the registry imports
it before the engine exists); the program's per-run state lives in `Federation.program_state`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vfl_core.methods.dlvm.steps import STEPS, dims
from vfl_core.methods.spec import MethodSpec, ProgramRounds, no_head_tasks

if TYPE_CHECKING:
    from vfl_core.methods.dlvm.program import DlvmProgram
    from vfl_core.methods.dlvm.roles import DlvmRoles
    from vfl_core.methods.federation_port import FederationPort
    from vfl_core.methods.party_port import PartyPort
    from vfl_core.methods.spec import RunConfig


class DlvmRounds(ProgramRounds):
    """The engine's entry into a run's DlvmProgram."""

    def build(self, fed: FederationPort) -> DlvmProgram:
        from vfl_core.methods.dlvm.program import DlvmProgram  # the program needs the engine

        return DlvmProgram(fed)

    def epochs(self, config: RunConfig) -> int:
        return config.epochs + config.dlvm.stage2_epochs  # stage 1, then stage 2

    def party_state(self, party: PartyPort) -> DlvmRoles:
        from vfl_core.methods.dlvm.roles import DlvmRoles  # the networks need torch

        return DlvmRoles(party)

    def embed_width(self, fed: FederationPort) -> int | None:
        return 2 * fed.config.dlvm.latent_dim  # an expert: [mean | log-variance]


DLVM_SPEC = MethodSpec(
    name="dlvm",
    display_name="DLVM-VFL",
    fusion="mean",  # unused: the experts meet in the product-of-experts posterior
    slots="shared",
    heads="active_party",  # the classifier p(y | h) at the lowest label block
    tasks=no_head_tasks,  # the experts meet in a posterior instead
    combination="heads",
    replacement="nothing",  # a party that misses a phase is a missing block of the posterior
    unlabelled_rows=True,  # stage 1 learns from every training sample, labelled or not
    program=DlvmRounds(),
    steps=STEPS,
    dims=dims,
)
