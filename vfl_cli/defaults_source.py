"""Where vfl_cli/defaults.py comes from: the config models' defaults and the names the options
list, read from the models (this imports torch). `python -m vfl_cli.defaults_source` writes
vfl_cli/defaults.py again (then `ruff format` it); tests/test_cli_help.py fails when the two
differ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from vfl_client.runner import ClientConfig
from vfl_coordinator.config import CoordinatorConfig, Deadlines
from vfl_core.auto_rounds import AUTO_EPOCH_FLOW, AUTO_FRESH_OWN_TOWER, AUTO_STALENESS
from vfl_core.config import (
    AUTO_MAX_BATCH,
    AUTO_PATIENCE,
    AUTO_ROUNDS_PER_EPOCH,
    AUTO_SMALL_EPOCHS,
    AUTO_STALE_MIN_EPOCHS,
    AUTO_STALE_PATIENCE,
    AUTO_TABLE_LR,
    DEFAULT_BATCH,
    DEFAULT_LR,
    METHODS,
    DvflConfig,
    ModelConfig,
    TrainConfig,
)
from vfl_core.data.learning_task import TASKS
from vfl_core.data.preprocess import DEFAULT_MAX_ONEHOT
from vfl_core.data.tabular import DEFAULT_TEST_FRACTION
from vfl_core.methods.dlvm.config import DlvmConfig
from vfl_core.model.lr_schedule import DECAY_HALF_LIFE
from vfl_core.privacy.config import PrivacyConfig
from vfl_core.training.alignment import DEMO_SECRET
from vfl_core.training.faults import ENTITIES, FaultConfig
from vfl_wire.security import OPERATOR

TARGET = Path(__file__).with_name("defaults.py")
HEADER = '''"""The config models' defaults and the names the options list, as
vfl_cli/defaults_source.py reads them from the models: the commands show them in their help
without importing torch, grpc or the models (so `--help` answers at once). Generated: do not
edit; run `python -m vfl_cli.defaults_source` (then `ruff format vfl_cli/defaults.py`) after
changing a model's default."""

from pathlib import Path

'''


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    """The model's defaults, nested models left out (each has its own table)."""
    values = {k: f.get_default(call_default_factory=True) for k, f in model.model_fields.items()}
    return {k: v for k, v in values.items() if not isinstance(v, BaseModel)}


def current() -> dict[str, Any]:
    """Every table of vfl_cli/defaults.py, read from the models now."""
    return {
        "TRAIN": _fields(TrainConfig),
        "MODEL": _fields(ModelConfig),
        "DVFL": _fields(DvflConfig),
        "DLVM": _fields(DlvmConfig),
        "PRIVACY": _fields(PrivacyConfig),
        "CLIENT": {k: v for k, v in _fields(ClientConfig).items() if k != "data"},
        "COORDINATOR": _fields(CoordinatorConfig),
        "DEADLINES": _fields(Deadlines),
        "FAULTS": _fields(FaultConfig),
        "METHODS": tuple(METHODS),
        "FAULT_ENTITIES": tuple(ENTITIES),
        "TASKS": tuple(TASKS),
        "MAX_ONEHOT": DEFAULT_MAX_ONEHOT,
        "AUTO_PATIENCE": AUTO_PATIENCE,
        "AUTO_SMALL_EPOCHS": AUTO_SMALL_EPOCHS,
        "AUTO_STALE_MIN_EPOCHS": AUTO_STALE_MIN_EPOCHS,
        "AUTO_STALE_PATIENCE": AUTO_STALE_PATIENCE,
        "AUTO_STALENESS": AUTO_STALENESS,
        "AUTO_EPOCH_FLOW": AUTO_EPOCH_FLOW,
        "AUTO_FRESH_OWN_TOWER": AUTO_FRESH_OWN_TOWER,
        "AUTO_ROUNDS_PER_EPOCH": AUTO_ROUNDS_PER_EPOCH,
        "AUTO_MAX_BATCH": AUTO_MAX_BATCH,
        "AUTO_TABLE_LR": AUTO_TABLE_LR,
        "DEFAULT_BATCH": DEFAULT_BATCH,
        "DEFAULT_LR": DEFAULT_LR,
        "DECAY_HALF_LIFE": DECAY_HALF_LIFE,
        "TEST_FRACTION": DEFAULT_TEST_FRACTION,
        "DEMO_SECRET": DEMO_SECRET,
        "OPERATOR": OPERATOR,
    }


def _literal(value: Any) -> str:
    if isinstance(value, Path):
        return f"Path({str(value)!r})"
    if isinstance(value, dict):
        items = "".join(f"    {k!r}: {_literal(v)},\n" for k, v in value.items())
        return "{\n" + items + "}"
    return repr(value)


def render() -> str:
    tables = "".join(f"{name} = {_literal(value)}\n" for name, value in current().items())
    return HEADER + tables


def main() -> None:
    TARGET.write_text(render())


if __name__ == "__main__":
    main()
