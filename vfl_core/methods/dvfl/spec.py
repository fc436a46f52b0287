"""Decoupled VFL as a method spec (vfl_core.methods.registry registers it): its own round program.

The spec's data fields describe what reports and the demo ask of a method: one predictor, the
label owner (the active party); the rounds themselves are `vfl_core.methods.dvfl.program`'s.
This module imports only the spec types (the registry imports it before the engine exists); the
program's per-run state lives in `Federation.program_state`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vfl_core.methods.dvfl.steps import STEPS, dims
from vfl_core.methods.spec import MethodSpec, ProgramRounds, no_head_tasks

if TYPE_CHECKING:
    from vfl_core.methods.dvfl.program import DvflProgram
    from vfl_core.methods.dvfl.roles import DvflRoles
    from vfl_core.methods.federation_port import FederationPort
    from vfl_core.methods.party_port import PartyPort
    from vfl_core.methods.spec import RunConfig


class DvflRounds(ProgramRounds):
    """The engine's entry into a run's DvflProgram."""

    def build(self, fed: FederationPort) -> DvflProgram:
        from vfl_core.methods.dvfl.program import DvflProgram  # the program needs the engine

        return DvflProgram(fed)

    def epochs(self, config: RunConfig) -> int:
        return config.epochs + config.dvfl.owner_epochs

    def party_state(self, party: PartyPort) -> DvflRoles:
        from vfl_core.methods.dvfl.roles import DvflRoles  # the tiers' models need torch

        return DvflRoles(party)

    def embed_width(self, fed: FederationPort) -> int | None:
        return fed.config.dvfl.guest_dim

    def rejoined(self, fed: FederationPort, block: int) -> bool:
        self.run(fed).rejoined(block)
        return True


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
    fault_entities=("guest", "host", "link"),
    steps=STEPS,
    dims=dims,
)
