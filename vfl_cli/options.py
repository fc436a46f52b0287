"""Config files and the options merged onto them (`vfl simulate`, `vfl-coordinator`, `vfl-client`):
a flag given on the command line beats the file's key, which beats the model's default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from vfl_core.errors import ConfigError

if TYPE_CHECKING:
    from vfl_core.config import TrainConfig


def read_config_file(path: Path | None) -> dict[str, Any]:
    """A YAML or JSON mapping; an unreadable or non-mapping file is a ConfigError."""
    if path is None:
        return {}
    import yaml  # not for --help

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


# Where an option's value came from when it beats a config file's key: the user said so.
_GIVEN = {"COMMANDLINE", "ENVIRONMENT", "PROMPT"}  # click's ParameterSource names


def given(
    ctx: typer.Context | None, options: dict[str, Any], renamed: dict[str, str] | None = None
) -> dict[str, Any]:
    """The options of the running command that were given on the command line (or by their
    environment variable), not left at their defaults, keyed by the config field they set
    (`renamed` maps the options named apart from theirs). Precedence is flag > environment >
    config file > the model's default, so only these override a config file's keys.
    Without a context (a plain function call) every option counts as given."""
    names = renamed or {}
    return {
        names.get(k, k): v for k, v in options.items() if ctx is None or _source(ctx, k) in _GIVEN
    }


def from_file(
    ctx: typer.Context | None, settings: dict[str, Any], values: dict[str, Any]
) -> dict[str, Any]:
    """`values` (options of the running command, by name) with each one not given on the command
    line taken from the config file's key of the same name; the keys used are popped from
    `settings`."""
    flags = given(ctx, values)
    merged = dict(values)
    for name in values:
        if name in settings:
            value = settings.pop(name)
            if name not in flags:
                merged[name] = value
    return merged


def refuse_unknown_keys(
    path: Path | None, settings: dict[str, Any], known: set[str], section: str | None = None
) -> None:
    """A config file's key that no option or config field of the command reads would be silently
    ignored: refuse it, naming the keys the command knows (in `section`, a mapping of the file
    such as `train:`, the keys that mapping knows)."""
    unknown = sorted(set(settings) - known)
    if unknown:
        inside = f" in {section}:" if section is not None else ""
        raise ConfigError(
            f"config {path}: unknown key {unknown[0]!r}{inside} "
            f"(known keys: {', '.join(sorted(known))})"
        )


def section(path: Path | None, settings: dict[str, Any], name: str) -> dict[str, Any]:
    """The mapping under a config file's key `name` (popped from `settings`; {} if absent)."""
    value = settings.pop(name, None) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"config {path}: {name}: must hold a mapping, not {type(value).__name__}")
    return value


def train_keys() -> set[str]:
    """The keys a config file's `train:` mapping may hold: TrainConfig's fields."""
    from vfl_core.config import TrainConfig  # torch: not for --help

    return set(TrainConfig.model_fields)


def _source(ctx: typer.Context, name: str) -> str | None:
    source = ctx.get_parameter_source(name)
    return None if source is None else source.name


def parse_ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated integers, got {text!r}") from None


def train_config(base: dict[str, Any], **overrides: Any) -> TrainConfig:
    """TrainConfig from a config file's mapping plus the options given on the command line."""
    from vfl_core.config import TrainConfig  # torch: not for --help

    data = dict(base)
    model = dict(data.pop("model", {}) or {})
    model_keys = ("representation", "embed_dim", "hidden", "head", "head_hidden", "dropout")
    embeddings = ("num_embedding", "num_bins", "num_embedding_dim", "ensemble", "linear_lane")
    for key in (*model_keys, "norm", "categorical_dim", *embeddings):
        value = overrides.pop(key, None)
        if value is not None:
            model[key] = value
    dvfl = dict(data.pop("dvfl", {}) or {})
    for key in (
        "period",
        "host_steps",
        "owner_epochs",
        "owner_patience",
        "owner_min_epochs",
        "period_epochs",
    ):
        value = overrides.pop(f"dvfl_{key}", None)
        if value is not None:
            dvfl[key] = value
    dlvm = dict(data.pop("dlvm", {}) or {})
    for key in [k for k in overrides if k.startswith("dlvm_")]:  # --dlvm-* options
        value = overrides.pop(key)
        if value is not None:
            dlvm[key.removeprefix("dlvm_")] = value
    privacy = dict(data.pop("privacy", {}) or {})
    for key in [k for k in overrides if k.startswith("privacy_")]:  # --privacy-* options
        value = overrides.pop(key)
        if value is not None:
            privacy[key.removeprefix("privacy_")] = value
    data.update({k: v for k, v in overrides.items() if v is not None})
    data["model"] = model
    if privacy:
        data["privacy"] = privacy
    if dvfl:
        data["dvfl"] = dvfl
    if dlvm:
        data["dlvm"] = dlvm
    return TrainConfig.model_validate(data)


def shown(value: Any) -> str:
    """A default as an option's help shows it: 128,64 for a tuple, on/off for a bool."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def samples(n: int) -> str:
    """ "1 sample", "2 samples"."""
    return f"{n} sample" + ("" if n == 1 else "s")
