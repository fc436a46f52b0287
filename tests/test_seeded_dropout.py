"""Dropout masks fixed by the run's seed (vfl_core.model.tower.SeededDropout): before, a party
MLP's dropout drew from torch's global generator, so a `--dropout` run depended on whatever had
run earlier in the same process (two same-seed runs in one process scored 82.02% and 78.09%)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.model.model_config import ModelConfig
from vfl_core.model.models import build_representation
from vfl_core.model.tower import SeededDropout


def test_masks_come_from_the_seed_not_the_global_generator() -> None:
    outputs = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        layer = SeededDropout(0.5, seed=7).train()
        outputs.append([layer(torch.ones(64, 8)) for _ in range(3)])
    for a, b in zip(*outputs, strict=True):
        assert torch.equal(a, b)
    first, second, _ = outputs[0]
    assert not torch.equal(first, second)  # a new mask at every draw
    assert set(first.unique().tolist()) == {0.0, 2.0}  # nn.Dropout's scaling: kept / (1 - p)
    assert 0.35 < (first == 0).float().mean().item() < 0.65
    other = SeededDropout(0.5, seed=8).train()(torch.ones(64, 8))
    assert not torch.equal(other, first)


def test_eval_and_zero_p_pass_the_input_through() -> None:
    x = torch.randn(5, 3)
    assert torch.equal(SeededDropout(0.5, seed=1).eval()(x), x)
    assert torch.equal(SeededDropout(0.0, seed=1).train()(x), x)


def test_the_count_of_masks_travels_in_the_state_dict_and_old_states_load() -> None:
    config = ModelConfig(representation="mlp", hidden=(8, 8), dropout=0.3)
    model = build_representation(config, (5,), 3).train()
    x = torch.randn(4, 5)
    model(x), model(x)
    state = model.state_dict()
    resumed = build_representation(config, (5,), 3).train()
    resumed.load_state_dict(state)
    assert torch.equal(resumed(x), model(x))  # the third mask in both
    old = {k: v for k, v in state.items() if not k.endswith("_extra_state")}
    fresh = build_representation(config, (5,), 3)
    fresh.load_state_dict(old)  # a checkpoint written before: its count starts at 0
    assert all(m.draws == 0 for m in fresh.modules() if isinstance(m, SeededDropout))


def _tables(tmp_path: Path) -> list[Path]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(300, 6, generator=gen)
    y = (x[:, 0] + x[:, 3] > 0).long()
    paths = []
    for part, columns in enumerate(((0, 1, 2), (3, 4, 5))):
        names = ",".join(f"x{c}" for c in columns)
        label = ",y" if part == 0 else ""
        rows = []
        for i in range(300):
            cells = ",".join(f"{x[i, c].item():.5f}" for c in columns)
            rows.append(f"{i},{cells}" + (f",{y[i].item()}" if part == 0 else ""))
        path = tmp_path / f"p{part}.csv"
        path.write_text(f"id,{names}{label}\n" + "\n".join(rows) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


@pytest.mark.slow
def test_given_dropout_when_simulated_twice_in_one_process_then_the_same_result(
    tmp_path: Path,
) -> None:
    p0, p1 = _tables(tmp_path)
    results = []
    for run in range(2):
        torch.manual_seed(100 + run)  # what ran before in the process must not matter
        torch.rand(1000)
        out = tmp_path / f"r{run}.json"
        args = ["simulate", "--data", str(p0), "--data", str(p1), "--id-column", "id"]
        args += ["--label-column", "y", "--epochs", "3", "--dropout", "0.3", "--seed", "4"]
        done = CliRunner().invoke(app, [*args, "--out", str(out), "--no-progress"])
        assert done.exit_code == 0, done.output
        results.append(json.loads(out.read_text()))
    first, second = (_untimed(r) for r in results)
    assert first == second
    assert [e["mean_loss"] for e in first["epochs"]]  # the losses are among what is compared


def _untimed(value: object) -> object:
    """`value` without its wall times, the only thing two same-seed runs may differ in."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if "seconds" not in k}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value
