"""Training options shared by `vfl simulate` and `vfl-coordinator`, merged onto a config file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from vfl_core.config import TrainConfig
from vfl_core.errors import ConfigError


def read_config_file(path: Path | None) -> dict[str, Any]:
    """A YAML or JSON mapping; an unreadable or non-mapping file is a ConfigError."""
    if path is None:
        return {}
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read config {path}: {str(err).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must hold a mapping, not {type(data).__name__}")
    return data


def parse_ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated integers, got {text!r}") from None


def train_config(base: dict[str, Any], **overrides: Any) -> TrainConfig:
    """TrainConfig from a config file's mapping plus the options given on the command line."""
    data = dict(base)
    model = dict(data.pop("model", {}) or {})
    for key in ("representation", "embed_dim", "hidden", "head", "head_hidden"):
        value = overrides.pop(key, None)
        if value is not None:
            model[key] = value
    dvfl = dict(data.pop("dvfl", {}) or {})
    for key in ("period", "host_steps", "owner_epochs"):
        value = overrides.pop(f"dvfl_{key}", None)
        if value is not None:
            dvfl[key] = value
    dlvm = dict(data.pop("dlvm", {}) or {})
    for key in [k for k in overrides if k.startswith("dlvm_")]:  # --dlvm-* options
        value = overrides.pop(key)
        if value is not None:
            dlvm[key.removeprefix("dlvm_")] = value
    data.update({k: v for k, v in overrides.items() if v is not None})
    data["model"] = model
    if dvfl:
        data["dvfl"] = dvfl
    if dlvm:
        data["dlvm"] = dlvm
    return TrainConfig.model_validate(data)


def samples(n: int) -> str:
    """ "1 sample", "2 samples"."""
    return f"{n} sample" + ("" if n == 1 else "s")
