"""Turn user errors into one readable line and a documented exit code, never a traceback."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from pydantic import ValidationError

from vfl_core.errors import VflError

P = ParamSpec("P")
R = TypeVar("R")

EXIT_USER_ERROR = 2
EXIT_RUN_NOT_OK = 3  # a client whose run failed or was interrupted (the coordinator said so)
EXIT_INTERRUPTED = 130


def one_line(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(x) for x in first["loc"]) or "value"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"invalid {where}: {first['msg']}{more}"


def user_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorator for command bodies: VflError and invalid configs exit 2 with one line."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except VflError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(EXIT_USER_ERROR) from None
        except ValidationError as err:
            typer.echo(f"error: {one_line(err)}", err=True)
            raise typer.Exit(EXIT_USER_ERROR) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
