"""The command class of every `vfl`, `vfl-client` and `vfl-coordinator` command: options in their
help panels (vfl_cli.option_names), old spellings accepted with a notice, and a help screen
without `<bool>` after flags whose option names fit 80 columns."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from vfl_cli.option_names import DEPRECATED, ORDER, PANELS

# Until this release the old spellings of DEPRECATED are accepted.
REMOVED_IN = "0.3"


class VflCommand(TyperCommand):
    """A typer command whose options sit in their panels (in ORDER), which accepts the old
    spellings of its options and draws its help without `<bool>`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if getattr(param, "rich_help_panel", "") is None and param.opts:
                param.rich_help_panel = PANELS.get(param.opts[0].lstrip("-"))  # type: ignore[attr-defined]
        self.params.sort(key=_panel_rank)  # panels in ORDER; options keep their order in each

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        names = {opt for p in self.params for opt in (*p.opts, *p.secondary_opts)}
        return super().parse_args(ctx, respell(self.name or "", names, args))

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        with _plain_flags(self.get_params(ctx)):
            super().format_help(ctx, formatter)


class VflGroup(TyperGroup):
    """`vfl` and `vfl bench`: their help without `<bool>` after --help."""

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        with _plain_flags(self.get_params(ctx)):
            super().format_help(ctx, formatter)


def respell(command: str, names: set[str], args: list[str]) -> list[str]:
    """`args` with the deprecated spellings of `command`'s options replaced by their names; one
    line on stderr for each."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":  # what follows is no option
            return out + args[i:]
        name, eq, value = arg.partition("=")
        new, commands = DEPRECATED.get(name, ("", ()))
        if command in commands and name not in names and new in names:
            typer.echo(
                f"warning: {name} is deprecated, use {new} (accepted until release {REMOVED_IN})",
                err=True,
            )
            arg = new + eq + value
        out.append(arg)
    return out


@contextlib.contextmanager
def _plain_flags(params: list[Any]) -> Iterator[None]:
    """While the help is drawn: no `<bool>` type after a flag; a flag's off switch (--no-x) in
    its default, not in a column of its own that would squeeze the option names at 80 columns;
    a default given as text (`show_default="32"`: the config model's, for an option whose None
    means "not given") shown as a default, without typer's parentheses."""
    saved = [(p, p.metavar, p.secondary_opts, p.show_default, p.default) for p in params]
    for param, _, secondary, shown, value in saved:
        if param.name == "help":
            param.metavar = ""
            continue
        text = shown if isinstance(shown, str) else None
        if _is_flag(param):
            param.metavar = ""
            text = text or ("on" if value else "off")
            if secondary and text != "off":
                text = f"{text}; {secondary[0]} turns it off"
            param.secondary_opts = []
        if text is not None:
            param.default, param.show_default = text, True
    try:
        yield
    finally:
        for param, metavar, secondary, shown, value in saved:
            param.metavar, param.secondary_opts = metavar, secondary
            param.show_default, param.default = shown, value


def _panel_rank(param: Any) -> int:
    panel = getattr(param, "rich_help_panel", None)
    return ORDER.index(panel) if panel in ORDER else len(ORDER)


def _is_flag(param: Any) -> bool:
    return bool(getattr(param, "is_flag", False)) and not getattr(param, "count", False)


def vfl_commands(app: typer.Typer) -> typer.Typer:
    """`app` with VflCommand as the class of each of its commands and sub-commands."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = VflCommand
    for group in app.registered_groups:
        if group.typer_instance is not None:
            vfl_commands(group.typer_instance)
            group.typer_instance.info.cls = VflGroup
    return app


def single(command: Any) -> typer.Typer:
    """The app of a console script of one command (`typer.run`), with VflCommand."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command(cls=VflCommand)(command)
    return app


def run(command: Any) -> None:
    """`typer.run(command)` with VflCommand."""
    single(command)()
