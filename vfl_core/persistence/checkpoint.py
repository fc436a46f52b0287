"""Checkpoints written atomically and read back safely.

A checkpoint is one `torch.save` file holding a plain dict:

    {"format": 1, "config_json": <TrainConfig JSON>, "meta": {...}, "state": {...}}

`state` and `meta` must hold only tensors and plain types (dict, list, tuple, str, int, float,
bool, None), because `load_checkpoint` reads with `torch.load(weights_only=True)`: a checkpoint
can never run code. A Party's state (module and optimiser state dicts) is such a dict.

Writing is atomic: the bytes go to a temporary file in the same directory, which is flushed and
fsync'ed, renamed over the target with `os.replace`, and the directory is fsync'ed. A crash at
any point leaves either the previous checkpoint or the new one, never a torn file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import re
import shutil
import tempfile
import zipfile
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfl_core.errors import ConfigError, DataError

if TYPE_CHECKING:
    from vfl_core.training.party import Party

# torch is imported by the functions that read or write a file: the coordinator imports this
# module for its checkpoints, and a run that writes none never loads torch.

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
SUFFIX = ".pt"
_KEYS = ("format", "config_json", "meta", "state")


def save_checkpoint(path: Path, state: dict, config_json: str, meta: dict) -> None:
    """Write `state` with the run's config and `meta` to `path`, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT_VERSION, "config_json": config_json, "meta": meta, "state": state}
    check_plain(payload, "checkpoint")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    import torch

    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except RuntimeError as err:
        # torch's zip writer reports a failed write (a full disk) as a RuntimeError, without
        # the OS's reason: an OSError here, which callers turn into their one-line error
        tmp.unlink(missing_ok=True)
        free = shutil.disk_usage(path.parent).free
        reason = str(err).splitlines()[0]
        raise OSError(f"write failed (a full disk? {free} B free there; torch: {reason})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    log.info("checkpoint written: %s", path)


def load_checkpoint(path: Path, expect_config_json: str | None) -> dict[str, Any]:
    """Read a checkpoint; returns the dict with keys format, config_json, meta and state.

    Raises DataError (one line) for a missing, truncated or corrupt file, and ConfigError when
    `expect_config_json` is given and the checkpoint was written under another configuration.
    """
    path = Path(path)
    payload = _read(path)
    if expect_config_json is not None:
        check_config(path, payload["config_json"], expect_config_json)
    return payload


def check_config(
    path: Path, found_json: str, expect_json: str, loose: Collection[str] = ()
) -> None:
    """Refuse a checkpoint whose configuration differs (compared as JSON values, not text), but
    in the top-level fields `loose` (what a party records from the federation's calls,
    vfl_core.methods.laser.fresh_own.learned)."""
    try:
        found, expected = json.loads(found_json), json.loads(expect_json)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: configuration is not valid JSON: {err}") from None
    if loose and isinstance(found, dict) and isinstance(expected, dict):
        found = {k: v for k, v in found.items() if k not in loose}
        expected = {k: v for k, v in expected.items() if k not in loose}
    if found != expected:
        diff = _first_difference(found, expected)
        raise ConfigError(f"{path}: checkpoint was written with another configuration ({diff})")


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise DataError(f"{path}: no checkpoint file")
    import torch

    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (
        RuntimeError,
        EOFError,
        OSError,
        ValueError,
        IndexError,  # a few bytes of garbage can break the unpickler's stack
        KeyError,
        pickle.UnpicklingError,
    ) as err:
        raise DataError(f"{path}: corrupt or truncated checkpoint ({_first_line(err)})") from None
    except zipfile.BadZipFile as err:  # pragma: no cover - torch usually wraps it
        raise DataError(f"{path}: corrupt checkpoint ({_first_line(err)})") from None
    if not isinstance(payload, dict) or any(k not in payload for k in _KEYS):
        raise DataError(f"{path}: not a checkpoint (expected keys {', '.join(_KEYS)})")
    if payload["format"] != FORMAT_VERSION:
        raise DataError(f"{path}: checkpoint format {payload['format']!r}, expected 1")
    if not isinstance(payload["config_json"], str) or not isinstance(payload["state"], dict):
        raise DataError(f"{path}: checkpoint has a malformed config or state")
    return payload


def _first_difference(found: object, expected: object, where: str = "") -> str:
    """A short description of the first place two JSON values differ."""
    if isinstance(found, dict) and isinstance(expected, dict):
        for key in sorted(set(found) | set(expected)):
            if found.get(key, _MISSING) != expected.get(key, _MISSING):
                sub = f"{where}.{key}" if where else str(key)
                return _first_difference(found.get(key, _MISSING), expected.get(key, _MISSING), sub)
    return f"{where or 'value'}: checkpoint has {found!r}, expected {expected!r}"


class _Missing:
    def __repr__(self) -> str:
        return "nothing"


_MISSING = _Missing()


def _first_line(err: BaseException) -> str:
    """The error's type and first sentence (torch's load errors run to several paragraphs)."""
    text = str(err).strip().splitlines()
    if not text:
        return type(err).__name__
    sentence = text[0].split(". ")[0].rstrip(".")
    return f"{type(err).__name__}: {sentence[:160]}"


_PLAIN = (str, int, float, bool, type(None))


def check_plain(value: object, where: str = "state") -> None:
    """Refuse anything `torch.load(weights_only=True)` would refuse to read back."""
    if isinstance(value, dict):
        for key, item in value.items():
            check_plain(key, f"{where} key")
            check_plain(item, f"{where}[{key!r}]")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_plain(item, f"{where}[{i}]")
    elif not isinstance(value, _PLAIN) and not _is_tensor(value):
        raise ConfigError(
            f"{where}: {type(value).__name__} cannot go into a checkpoint "
            "(tensors and plain types only)"
        )


def _is_tensor(value: object) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ------------------------------------------------------------------------ party checkpoints


# The names of the files a party `<name>` keeps beside `<name>.pt` (checkpoint_store): another
# party named like one of them would write its end checkpoint over that file in a shared directory.
_LOOKS_KEPT = re.compile(r".+-(best|round-\d+)")


def check_checkpoint_name(name: str) -> str:
    """`name` if it can name a party's checkpoint files, else ConfigError: not a plain file name,
    or one that another party's best-epoch or round file has (`X-best`, `X-round-000000040`)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name:
        raise ConfigError(f"party id {name!r} cannot name a checkpoint file")
    if _LOOKS_KEPT.fullmatch(name):
        raise ConfigError(
            f"party id {name!r} cannot name checkpoint files: it is the name of the best-epoch"
            " or round file of another party in the same directory; choose another name"
        )
    return name


def party_checkpoint_path(directory: Path, party_id: str) -> Path:
    """`directory/<party_id>.pt`; a party id that cannot name a checkpoint file is refused."""
    return Path(directory) / f"{check_checkpoint_name(party_id)}{SUFFIX}"


def save_party_checkpoint(directory: Path, party: Party, meta: dict | None = None) -> Path:
    """Save a Party's state (weights, optimisers, last round) and its TrainConfig."""
    path = party_checkpoint_path(directory, party.party_id)
    info = {"party_id": party.party_id, "block": party.block, "last_round": party.last_round}
    meta = {**info, **(meta or {})}
    save_checkpoint(path, party.state_dict(), party.config.model_dump_json(), meta)
    return path
