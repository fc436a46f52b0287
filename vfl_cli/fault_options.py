"""Injected faults (guest loss and lost messages) for `vfl simulate` and `vfl-coordinator`,
declared once: the same seeded fault process in one process or in a real federation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from vfl_core.errors import ConfigError
from vfl_core.faults import ENTITIES, FaultConfig

Opt = typer.Option


@dataclass(frozen=True)
class FaultOptions:
    """R_d, R_u and link loss of vfl_core.faults (DVFL's guest loss), per training round."""

    fault_rate: Annotated[
        float, Opt(help="R_d: probability that a party fails at each training round")
    ] = 0.0
    rejoin_rate: Annotated[
        float, Opt(help="R_u: probability that a failed party comes back at each round")
    ] = 1.0
    link_loss: Annotated[
        float, Opt(help="probability that one message of a training round is lost")
    ] = 0.0
    fault_entity: Annotated[
        str, Opt(help="what fails: guest (a party) | host, link (dvfl's hosts, guest-host links)")
    ] = "guest"

    def config(self) -> FaultConfig:
        if self.fault_entity not in ENTITIES:
            raise ConfigError(
                f"--fault-entity must be one of {', '.join(ENTITIES)}, got {self.fault_entity!r}"
            )
        return FaultConfig(
            fail_rate=self.fault_rate,
            rejoin_rate=self.rejoin_rate,
            link_loss=self.link_loss,
            entity=self.fault_entity,
        )
