"""Injected faults (guest loss and lost messages) for `vfl simulate` and `vfl-coordinator`,
declared once: the same seeded fault process in one process or in a real federation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vfl_cli import defaults
from vfl_cli.options import given
from vfl_core.errors import ConfigError

if TYPE_CHECKING:
    from vfl_core.training.faults import FaultConfig

Opt = typer.Option
# Options named apart from the FaultConfig field they set.
_FIELDS = {"fault_rate": "fail_rate", "fault_entity": "entity"}


@dataclass(frozen=True)
class FaultOptions:
    """R_d, R_u and link loss of vfl_core.training.faults (DVFL's guest loss), per training
    round."""

    fault_rate: Annotated[
        float, Opt(help="R_d: probability that a party fails at each training round")
    ] = defaults.FAULTS["fail_rate"]
    rejoin_rate: Annotated[
        float, Opt(help="R_u: probability that a failed party comes back at each round")
    ] = defaults.FAULTS["rejoin_rate"]
    link_loss: Annotated[
        float, Opt(help="probability that one message of a training round is lost")
    ] = defaults.FAULTS["link_loss"]
    fault_entity: Annotated[
        str, Opt(help="what fails: guest (a party) | host, link (dvfl's hosts, guest-host links)")
    ] = defaults.FAULTS["entity"]

    def over(self, ctx: typer.Context | None, base: dict[str, Any]) -> dict[str, Any]:
        """A config file's `faults:` mapping with the options given on the command line over it."""
        self.config()  # refuses a bad --fault-entity
        options = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**base, **given(ctx, options, _FIELDS)}

    def config(self) -> FaultConfig:
        from vfl_core.training.faults import ENTITIES, FaultConfig  # torch: not for --help

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
