"""Writing a run's small text files (results.json, a fitted preprocessing) so that a reader
never sees half of one: a temporary file beside it, then an atomic rename."""

from __future__ import annotations

import os
from pathlib import Path

from vfl_core.errors import DataError


def write_text_atomically(path: Path, text: str) -> None:
    """`path` holds `text`, or its old content if writing failed (a full disk: DataError)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise DataError(f"cannot write {path}: {exc.strerror or exc}") from None
