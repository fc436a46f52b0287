"""Option groups (vfl_cli/option_groups.py): a group of shared options declared once as a frozen
dataclass shows up in a typer command as ordinary options in the group parameter's place, with
the defaults of the parameter's default instance, and reaches the command as one instance."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from vfl_cli.option_groups import with_option_groups
from vfl_cli.train_options import TrainOptions
from vfl_core.errors import ConfigError

Opt = typer.Option


@dataclass(frozen=True)
class Reporting:
    every: Annotated[int, Opt(help="report every N steps")] = 1
    label: Annotated[str | None, Opt(help="a name for the report")] = None


def _app(command: Callable[..., None]) -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command()(command)
    return app


def test_given_a_group_parameter_when_typer_builds_the_command_then_its_fields_are_options_there():
    @with_option_groups
    def command(
        first: Annotated[int, Opt()] = 0,
        reporting: Reporting = Reporting(every=5),
        last: Annotated[bool, Opt()] = False,
    ) -> None:
        pass

    params = typer.main.get_command(_app(command)).params
    assert [p.name for p in params] == ["first", "every", "label", "last"]
    by_name = {p.name: p for p in params}
    assert by_name["every"].default == 5  # from the parameter's default instance
    assert by_name["every"].help == "report every N steps"
    assert by_name["label"].default is None and by_name["label"].opts == ["--label"]


def test_given_options_on_the_command_line_when_run_then_the_command_receives_one_group():
    seen: list[tuple[int, Reporting, bool]] = []

    @with_option_groups
    def command(
        first: Annotated[int, Opt()] = 0,
        reporting: Reporting = Reporting(),
        last: Annotated[bool, Opt()] = False,
    ) -> None:
        seen.append((first, reporting, last))

    result = CliRunner().invoke(_app(command), ["--label", "x", "--first", "3", "--last"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(_app(command), [])
    assert result.exit_code == 0, result.output
    assert seen == [(3, Reporting(every=1, label="x"), True), (0, Reporting(), False)]


def test_given_a_group_parameter_without_a_default_when_decorated_then_type_error():
    def command(reporting: Reporting) -> None:
        pass

    with pytest.raises(TypeError, match="'reporting' needs a default instance"):
        with_option_groups(command)


def test_given_train_options_when_applied_to_a_config_mapping_then_given_ones_override_it():
    base = {
        "epochs": 7,
        "lr": 0.5,
        "model": {"representation": "mlp", "embed_dim": 16, "head": "linear"},
    }
    cfg = TrainOptions(lr=0.01, hidden="32,8", head="mlp").config(base)
    assert cfg.epochs == 7 and cfg.lr == 0.01
    assert cfg.model.representation == "mlp" and cfg.model.embed_dim == 16
    assert tuple(cfg.model.hidden) == (32, 8) and cfg.model.head == "mlp"
    kept = TrainOptions().config(base)  # no option given: the mapping's values
    assert (kept.epochs, kept.lr, kept.model.embed_dim, kept.model.head) == (7, 0.5, 16, "linear")
    with pytest.raises(ConfigError, match="--hidden"):
        TrainOptions(hidden="32,x").config({})
