"""`vfl export`: a party's serving bundle from its checkpoint (the `<party id>.pt` a client
writes with --checkpoint-dir) and its data, as training read it."""

from __future__ import annotations

import json
from pathlib import Path

from vfl_core.config import TrainConfig
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.preprocess import TabularPreprocessor
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_core.errors import ConfigError, DataError
from vfl_core.inference.choice import ValidationChoice
from vfl_core.persistence.checkpoint import load_checkpoint
from vfl_core.protocol import ServingChoice
from vfl_core.serving.bundle import write_bundle
from vfl_core.training.party import Party


def export_bundle(
    checkpoint: Path,
    data: Path,
    out: Path,
    table: TableSource | None = None,
    threshold: float | None = None,
    choice: ServingChoice | None = None,
) -> Path:
    """Write the bundle of the party saved in `checkpoint` to `out`. `data`: its party
    directory, or (with `table`) its table, read with the fitted preprocessing the checkpoint
    holds (so the bundle transforms rows exactly as training did)."""
    payload = load_checkpoint(checkpoint, None)
    config = TrainConfig.model_validate_json(payload["config_json"])
    state = payload["state"]
    party_data = _data(data, table, state.get("preprocessing"))
    block = payload["meta"].get("block", party_data.meta.block)
    if block != party_data.meta.block:
        held = party_data.meta.block
        raise ConfigError(f"{checkpoint} is of block {block}, but {data} holds block {held}")
    party_id = str(payload["meta"].get("party_id", f"party{block}"))
    # A fixed private tower (PrivacyConfig.feature_tower) is in `state`: the seed it is drawn
    # from here only has to differ from the run's (drawing from the run's seed warns).
    redrawn = config.seed + 1
    party = Party(
        party_id, party_data, config, secret=b"unused: a bundle keys no IDs", tower_seed=redrawn
    )
    party.load_state_dict(state)
    return write_bundle(party, out, threshold, choice)


def _data(data: Path, table: TableSource | None, fitted: dict | None) -> PartyData:
    if table is None:
        return load_party_dir(data)
    if fitted is None:
        raise ConfigError(f"{data}: the checkpoint holds no fitted preprocessing for a table")
    pre = TabularPreprocessor.model_validate(fitted)
    return load_table_party(table, pre)[0]


def read_choice(results: Path) -> ServingChoice:
    """How a finished run decides, from its results.json: the threshold its config fixed or
    its validation split chose, and the subsets chosen per observed set (as the federation's
    `serving_choice()`; vfl_core.training.validation.Validator.threshold)."""
    try:
        saved = json.loads(results.read_text())
        configured = saved["config"].get("threshold", "auto")
        chosen = ValidationChoice.from_json(saved.get("validation_choice") or {})
    except OSError as err:
        raise DataError(f"--choice {results}: unreadable ({err.strerror})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise DataError(f"--choice {results}: not a run's results.json ({err!r})") from None
    if isinstance(configured, str):  # a rule: the validation split chose it
        threshold = chosen.threshold
    else:
        threshold = None if float(configured) == 0.5 else float(configured)
    return ServingChoice(threshold, dict(chosen.subsets), dict(chosen.heads))
