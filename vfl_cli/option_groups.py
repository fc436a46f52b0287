"""Options that several commands share, declared once as a group (a frozen dataclass).

Typer builds a command's options from its signature only, so a group of options would otherwise be
written out again in every command that takes it. Instead a command takes the group as one
parameter, e.g. `train: TrainOptions = TrainOptions()`, and `with_option_groups` shows typer the
group's fields as options in that place: same names, types, help and defaults as if written out.
The command receives one group instance built from them. The parameter's default instance gives
the options' defaults, so one command may differ from the others (`TrainOptions(epochs=10)`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")


def with_option_groups(command: Callable[..., R]) -> Callable[..., R]:
    """Expand each dataclass-typed parameter of a typer command into the group's own options."""
    signature = inspect.signature(command, eval_str=True)
    groups: dict[str, type] = {}
    params: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if isinstance(param.annotation, type) and dataclasses.is_dataclass(param.annotation):
            groups[param.name] = param.annotation
            params += _group_parameters(param)
        else:
            params.append(param)

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> R:
        for name, group in groups.items():
            given = {f.name: kwargs.pop(f.name) for f in dataclasses.fields(group)}
            kwargs[name] = group(**given)
        return command(**kwargs)

    # Typer reads these two (inspect.signature honours __signature__): real annotation objects,
    # since the command module's string annotations no longer match the parameters.
    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    wrapper.__annotations__["return"] = signature.return_annotation
    return wrapper


def _group_parameters(param: inspect.Parameter) -> list[inspect.Parameter]:
    """The group's fields as parameters, with the defaults of the parameter's default instance."""
    group = param.annotation
    if param.default is inspect.Parameter.empty:
        raise TypeError(f"option group {param.name!r} needs a default instance")
    hints = typing.get_type_hints(group, include_extras=True)
    return [
        inspect.Parameter(
            f.name, param.kind, default=getattr(param.default, f.name), annotation=hints[f.name]
        )
        for f in dataclasses.fields(group)
    ]
