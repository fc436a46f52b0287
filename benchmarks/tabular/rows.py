"""The rows of `vfl bench tabular`: the centralised ones (models on the joined columns of the same
split), then the federation's (at the end of this module).

- `linear`: logistic regression (classification) or ridge (regression) with scikit-learn's
  defaults; numeric cells missing (a party misses the row) imputed by the mean with a missing
  indicator, then standardised; categorical cells one-hot, a missing one its own category.
- `hgb`: HistGradientBoosting with its defaults; missing cells NaN, categoricals native.
- `central_mlp`: the federation's own representation model (vfl_core.model.models, built from
  the federation's resolved TrainConfig) on the parties' own preprocessed features side by side,
  and the federation's head: the skyline without federation. It trains with the federation's
  optimiser, lr, weight decay, batch size, epochs, schedule, class balancing and early stopping
  (its patience, on where the federation's is: a validation share of 100 samples or more, and
  its watched metric: Brier for binary tasks, RMSE, else accuracy; best epoch restored); what
  differs: one model instead of per-party models and a mean of embeddings, a missing block is
  zeros plus a missing-block indicator, no validation threshold (argmax), and regression
  targets are standardised. `Fit` varies how it trains and, with `towers`, gives it the
  federation's shape (`Towers`, below).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from benchmarks import procs
from benchmarks.tabular.tables import (
    ID_COLUMN,
    LABEL_BLOCK,
    LABEL_COLUMN,
    Prepared,
    party_block,
    party_features,
    raw_columns,
    score_sets,
)
from vfl_core.config import AUTO_MIN_VALIDATION, TrainConfig
from vfl_core.data.learning_task import REGRESSION
from vfl_core.model.lr_schedule import lr_at
from vfl_core.model.model_bank import make_optimizer
from vfl_core.model.models import build_head, build_representation, build_seeded

log = logging.getLogger(__name__)

Row = dict[str, Any]
# Learning-rate schedules the central MLP follows as the federation does (model_bank.set_lr);
# another is said in the row's note, not silently replaced.
MIRRORED_SCHEDULES = ("auto", "none", "cosine", "decay")
# The options that give this code the defaults issue 43 landed: the concatenating head weighted
# 1, no linear lanes, a round's loss the mean over its rows, LASER-VFL's heads where nothing is
# held out, torch's loop over the weights (its optimiser then). The VertiBench grid's rows
# `issue43`, `issue43_small` and `vfl bench wan`'s recipe `issue43` (run alike by
# `vfl simulate` and `vfl-coordinator`).
ISSUE43_MODEL = (
    "--concat-weight", "1", "--linear-lane", "0", "--round-loss", "mean",
    "--unvalidated-heads", "laser",
)  # fmt: skip
ISSUE43 = (*ISSUE43_MODEL, "--optimizer-kernel", "loop")


def _row(name: str, prep: Prepared, predicted: np.ndarray, seconds: float, **extra: Any) -> Row:
    y = prep.labels(prep.test_rows)
    scores = score_sets(prep.task, y, predicted, prep.observed(prep.test_rows))
    return {"row": name, "seconds": seconds, "scores": scores, **extra}


def linear_row(prep: Prepared) -> Row:
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    start = time.perf_counter()
    numeric = make_pipeline(SimpleImputer(add_indicator=True), StandardScaler())
    onehot = OneHotEncoder(handle_unknown="ignore", sparse_output=False)
    num, cat = raw_columns(prep, prep.train_rows)
    x = _stack(numeric.fit_transform(num) if num.shape[1] else num, _onehot(onehot, cat, fit=True))
    y = prep.labels(prep.train_rows)
    model = Ridge() if prep.task == REGRESSION else LogisticRegression(max_iter=5000)
    model.fit(x, y)
    seconds = time.perf_counter() - start
    num, cat = raw_columns(prep, prep.test_rows)
    x = _stack(numeric.transform(num) if num.shape[1] else num, _onehot(onehot, cat, fit=False))
    return _row("linear", prep, _predict(model, x, prep.task), seconds)


def _onehot(encoder: Any, cat: np.ndarray, fit: bool) -> np.ndarray:
    if not cat.shape[1]:
        return cat.astype(np.float64)
    cells = np.where(cat == None, "<missing>", cat).astype(str)  # noqa: E711 (elementwise)
    return encoder.fit_transform(cells) if fit else encoder.transform(cells)


def _stack(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate([p.astype(np.float64) for p in parts], axis=1)


def _predict(model: Any, x: np.ndarray, task: str) -> np.ndarray:
    return model.predict(x) if task == REGRESSION else model.predict_proba(x)


def hgb_row(prep: Prepared) -> Row:
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.preprocessing import OrdinalEncoder

    start = time.perf_counter()
    codes = OrdinalEncoder(
        handle_unknown="use_encoded_value", unknown_value=np.nan, encoded_missing_value=np.nan
    )
    num, cat = raw_columns(prep, prep.train_rows)
    categorical = [False] * num.shape[1] + [True] * cat.shape[1]
    x = _stack(num, codes.fit_transform(_nan_cells(cat)) if cat.shape[1] else cat)
    kind = (
        HistGradientBoostingRegressor if prep.task == REGRESSION else HistGradientBoostingClassifier
    )
    model = kind(categorical_features=np.array(categorical, dtype=bool), random_state=prep.seed)
    model.fit(x, prep.labels(prep.train_rows))
    seconds = time.perf_counter() - start
    num, cat = raw_columns(prep, prep.test_rows)
    x = _stack(num, codes.transform(_nan_cells(cat)) if cat.shape[1] else cat)
    return _row("hgb", prep, _predict(model, x, prep.task), seconds)


def lgbm_row(prep: Prepared) -> Row:
    """LightGBM with its default settings (a measurement extra: `pip install lightgbm`) on the
    same joined columns as `hgb_row`: categorical columns as its categorical features."""
    from lightgbm import LGBMClassifier, LGBMRegressor
    from sklearn.preprocessing import OrdinalEncoder

    start = time.perf_counter()
    codes = OrdinalEncoder(
        handle_unknown="use_encoded_value", unknown_value=np.nan, encoded_missing_value=np.nan
    )
    num, cat = raw_columns(prep, prep.train_rows)
    categorical = list(range(num.shape[1], num.shape[1] + cat.shape[1]))
    x = _stack(num, codes.fit_transform(_nan_cells(cat)) if cat.shape[1] else cat)
    kind = LGBMRegressor if prep.task == REGRESSION else LGBMClassifier
    # one thread: on a shared machine LightGBM's OpenMP threads spin for each other (a fit of
    # seconds took minutes), and its CPU seconds are then the fit's, not the waiting's
    model = kind(random_state=prep.seed, verbose=-1, n_jobs=1)
    model.fit(x, prep.labels(prep.train_rows), categorical_feature=categorical or "auto")
    seconds = time.perf_counter() - start
    num, cat = raw_columns(prep, prep.test_rows)
    x = _stack(num, codes.transform(_nan_cells(cat)) if cat.shape[1] else cat)
    return _row("lgbm", prep, _predict(model, x, prep.task), seconds)


def _nan_cells(cat: np.ndarray) -> np.ndarray:
    return np.where(cat == None, np.nan, cat)  # noqa: E711 (elementwise)


# ------------------------------------------------------------------------------ the central MLP


@dataclass(frozen=True)
class Fit:
    """How the central MLP trains beyond its TrainConfig (the screen's candidates)."""

    # the validation metric: the federation's (`_quality`) | accuracy | logloss
    watch: str = "federation"
    smoothing: float = 0.0  # label smoothing of the classification loss
    patience: int | None = None  # None: the federation's (TrainConfig.patience and its 100 rule)
    # "": one representation model on the joined features; "mean" | "concat": one per party,
    # fused (`Towers`, below), each present feature-only party dropped with `drop`
    towers: str = ""
    drop: float = 0.0
    head_layers: int = 1  # towers only: hidden layers of the head (the federation's has 1)


def central_row(prep: Prepared, train: TrainConfig, fit: Fit = Fit()) -> Row:
    """The federation's model on the joined features, trained like the federation."""
    torch.manual_seed(train.seed)
    # the federation's towers and head without federation: no lanes, no linear head
    train = train.model_copy(update={"model": train.model.model_copy(update={"linear_lane": 0})})
    start = time.perf_counter()
    features = partial(towers_features, prep) if fit.towers else _joined(prep)
    x = features(prep.train_rows)
    y = prep.labels(prep.train_rows)
    regression = prep.task == REGRESSION
    centre, scale = (float(y.mean()), float(y.std() or 1.0)) if regression else (0.0, 1.0)
    target = (y - centre) / scale if regression else y
    outputs = 1 if regression else len(prep.classes)
    if fit.towers:
        model: nn.Module = towers_model(prep, train, outputs, fit.towers, fit.drop, fit.head_layers)
    else:
        _, cards = party_features(prep, prep.train_rows[:1])
        model = nn.Sequential(
            build_representation(train.model, (x.shape[1],), train.seed, categorical=cards),
            build_head(train.model, outputs, train.seed + 1, tabular=True),
        )
    epochs = _fit(model, x, target, train, regression, fit)
    seconds = time.perf_counter() - start
    test = features(prep.test_rows)
    with torch.no_grad():
        out = model.eval()(torch.from_numpy(test))
    predicted = out[:, 0].numpy() * scale + centre if regression else out.softmax(1).numpy()
    note = (
        ""
        if train.scheduler in MIRRORED_SCHEDULES
        else f"scheduler {train.scheduler!r} not mirrored"
    )
    if note:
        log.warning("central_mlp: %s (trained with a constant learning rate)", note)
    return _row("central_mlp", prep, predicted, seconds, epochs=epochs, note=note)


def _joined(prep: Prepared) -> Callable[[np.ndarray], np.ndarray]:
    return lambda rows: party_features(prep, rows)[0]


def _patience(train: TrainConfig, fit: Fit, samples: int) -> int:
    """The federation's rule (vfl_core.training.train_rows): the configured patience, or unset
    AUTO_PATIENCE where the validation share holds AUTO_MIN_VALIDATION samples or more."""
    if fit.patience is not None:
        return fit.patience
    auto = train.early_stop_patience is None
    if auto and round(train.validation_fraction * samples) < AUTO_MIN_VALIDATION:
        return 0
    return train.patience(tabular=True)


def _fit(
    model: nn.Module, x: np.ndarray, y: np.ndarray, train: TrainConfig, regression: bool, fit: Fit
) -> int:
    """Train as the federation would (its early stopping too); returns the epochs trained."""
    gen = np.random.default_rng(train.seed)
    order = gen.permutation(len(y))
    patience = _patience(train, fit, len(y))
    held = round(train.validation_fraction * len(y)) if patience else 0
    fit_rows, val_rows = order[held:], order[:held]
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.float32 if regression else np.int64))
    opt = make_optimizer(model, train, tabular=True)
    best, best_state, since, trained = -np.inf, None, 0, 0
    reference: float | None = None  # the quality that last restarted the patience
    for epoch in range(train.epochs):
        _set_lr(opt, train, epoch)
        model.train()
        for batch in _batches(fit_rows, y, train, gen, regression):
            opt.zero_grad(set_to_none=True)
            _loss(model(xt[batch]), yt[batch], regression, fit.smoothing).backward()
            opt.step()
        trained = epoch + 1
        if not held:
            continue
        quality = _quality(model, xt[val_rows], yt[val_rows], regression, fit.watch)
        if quality > best:
            best, best_state = quality, copy.deepcopy(model.state_dict())
        margin = 0.0 if reference is None else train.early_stop_min_improvement * abs(reference)
        if reference is None or quality > reference + margin:
            reference, since = quality, 0
        else:
            since += 1
            if since >= patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    return trained


def _batches(
    rows: np.ndarray, y: np.ndarray, train: TrainConfig, gen: np.random.Generator, regression: bool
) -> list[torch.Tensor]:
    if train.balance == "resample" and not regression:
        counts = np.bincount(y[rows]).astype(np.float64)
        weights = 1.0 / counts[y[rows]]
        rows = gen.choice(rows, len(rows), p=weights / weights.sum())
    else:
        rows = gen.permutation(rows)
    size = train.batch_rows(len(rows), tabular=True)
    return [torch.from_numpy(rows[i : i + size]) for i in range(0, len(rows), size)]


def _set_lr(opt: torch.optim.Optimizer, train: TrainConfig, epoch: int) -> None:
    rate = lr_at(train.learning_rate(True), train.schedule(tabular=True), epoch, train.epochs)
    for group in opt.param_groups:
        group["lr"] = rate


def _loss(out: torch.Tensor, y: torch.Tensor, regression: bool, smoothing: float) -> torch.Tensor:
    if regression:
        return nn.functional.mse_loss(out[:, 0], y)
    return nn.functional.cross_entropy(out, y, label_smoothing=smoothing)


def _quality(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, regression: bool, watch: str
) -> float:
    """The validation metric, higher is better: the federation's (minus the MSE in regression,
    minus the Brier score on binary tasks, else the accuracy), or `watch`'s."""
    model.eval()
    with torch.no_grad():
        out = model(x)
    if regression:
        return -float(nn.functional.mse_loss(out[:, 0], y))
    if watch == "logloss":
        return -float(nn.functional.cross_entropy(out, y))
    if watch == "federation" and out.shape[1] == 2:
        return -float(((out.softmax(1)[:, 1] - y.float()) ** 2).mean())
    return float((out.argmax(1) == y).float().mean())


# ---------------------------------------------------- the central MLP in the federation's shape
# The central MLP in the federation's shape, an ablation of the generated tables' gap (issue 27):
# one representation model per party on its own columns, fused as LASER-VFL fuses them (the mean of
# the present parties' embeddings) or as the split-learning baselines do (their concatenation,
# zeros for a missing party), and one head; trained centrally on the joined rows
# (`central_row` above, `Fit.towers`). What it leaves out of the federation:
# LASER-VFL's subset objective (unless `Fit.drop` drops present feature parties at random while
# training), the validation threshold and the subset choice.

FUSIONS = ("mean", "concat")


class Towers(nn.Module):
    """Per-party towers, fused, then a head. Input: the parties' blocks side by side, then K
    presence flags (1: the party holds the row)."""

    def __init__(
        self, towers: list[nn.Module], widths: list[int], head: nn.Module, fusion: str, drop: float
    ) -> None:
        super().__init__()
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
        self.towers = nn.ModuleList(towers)
        self.widths = widths
        self.head = head
        self.fusion = fusion
        self.drop = drop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts, start = [], 0
        for tower, width in zip(self.towers, self.widths, strict=True):
            parts.append(tower(x[:, start : start + width]))  # (B, d)
            start += width
        present = x[:, start:]  # (B, K)
        if self.training and self.drop:
            # LASER-VFL trains the head on subsets of the present blocks; here each present
            # feature-only block is dropped with probability `drop` (the label party's stays)
            keep = (torch.rand_like(present) >= self.drop).float()
            keep[:, LABEL_BLOCK] = 1.0
            present = present * keep
        z = torch.stack(parts, dim=1) * present[:, :, None]  # (B, K, d)
        if self.fusion == "mean":
            fused = z.sum(dim=1) / present.sum(dim=1, keepdim=True).clamp(min=1.0)  # (B, d)
        else:
            fused = z.flatten(1)  # (B, K * d)
        return self.head(fused)


def towers_features(prep: Prepared, rows: np.ndarray) -> np.ndarray:
    """The parties' own blocks of `rows` side by side (zeros where a party misses a row), then
    the K presence flags."""
    blocks = [party_block(prep, k, rows) for k in range(len(prep.parties))]
    held = prep.split.held[:, rows].T.astype(np.float32)  # (n, K)
    return np.concatenate([*blocks, held], axis=1)


def towers_model(
    prep: Prepared, train: TrainConfig, outputs: int, fusion: str, drop: float, head_layers: int = 1
) -> Towers:
    """The federation's representation models (one per party, seeded seed + k) and its head on
    the fused embedding (K embeddings wide when concatenated)."""
    towers, widths = [], []
    for k, party in enumerate(prep.parties):
        width = party.meta.feature_shape[0]
        cards = tuple(party.meta.categorical)
        seed = train.seed + k
        towers.append(build_representation(train.model, (width,), seed, categorical=cards))
        widths.append(width)
    blocks = len(towers) if fusion == "concat" else 1
    seed = train.seed + len(towers)
    if head_layers > 1:  # a deeper MLP head than the federation's (the screen's candidate)
        head = build_seeded(seed, lambda: _deep_head(train, blocks, outputs, head_layers))
    else:
        head = build_head(train.model, outputs, seed, in_blocks=blocks, tabular=True)
    return Towers(towers, widths, head, fusion, drop)


def _deep_head(train: TrainConfig, blocks: int, outputs: int, layers: int) -> nn.Module:
    """`layers` hidden layers of the head's width, ReLU after each, then the logits."""
    width, parts = blocks * train.model.embed_dim, []
    for _ in range(layers):
        parts += [nn.Linear(width, train.model.head_hidden), nn.ReLU()]
        width = train.model.head_hidden
    return nn.Sequential(*parts, nn.Linear(width, outputs))


# ------------------------------------------------------------------------ the federation's rows
# The federation's rows of `vfl bench tabular`, each run the way a user runs it, with defaults
# (the seed aside, and --epochs in the quick mode):
#
# - `federation`: `vfl simulate --data party0.csv --data party1.csv --data party2.csv --id-column id
#   --label-column label` (in process);
# - `label_alone`: the same command with party 0's CSV only (the federation with K = 1);
# - `federation_grpc`: one `vfl-coordinator` and a `vfl-client --data partyK.csv` per party on
#   loopback (benchmarks.procs: plaintext and keyed-hash alignment, so TLS and PSI are not timed).

# The metrics the federation's result rows may carry (whichever its task has).
METRIC_KEYS = ("samples", "accuracy", "f1", "auc", "brier", "rmse", "mae", "r2")


def simulate_args(prep: Prepared, paths: list[Path], out: Path, epochs: int | None) -> list[str]:
    """What a user types to simulate these party tables (the seed fixed, defaults otherwise)."""
    args = ["simulate"]
    for path in paths:
        args += ["--data", str(path)]
    args += ["--id-column", ID_COLUMN, "--label-column", LABEL_COLUMN]
    if prep.task == REGRESSION:
        args += ["--task", REGRESSION]
    args += ["--seed", str(prep.seed), "--out", str(out), "--no-progress"]
    return args + (["--epochs", str(epochs)] if epochs is not None else [])


def simulate_row(
    name: str,
    prep: Prepared,
    parties: list[int],
    out: Path,
    epochs: int | None,
    curve_every: int = 0,
    extra: tuple[str, ...] = (),
) -> Row:
    """`vfl simulate` on the given parties' CSVs, in this process. With `curve_every`, it also
    scores the test rows every that many epochs (`--run-dir --eval-every`: a diagnostic of the
    epoch count, never used to choose a model; training is the same with or without it).
    `extra`: options added to the defaults (benchmarks.tabular.sweep)."""
    import typer

    from vfl_cli.app import app

    args = simulate_args(prep, [prep.split.paths[k] for k in parties], out, epochs) + list(extra)
    run_dir = out.with_suffix(".run")
    if curve_every:
        args += ["--run-dir", str(run_dir), "--eval-every", str(curve_every)]
    printed = io.StringIO()
    start, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(printed):
        typer.main.get_command(app).main(args, standalone_mode=False)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    result = json.loads(out.read_text())
    report = result["results"][0]
    return {
        "row": name,
        "seconds": result["seconds"],
        "wall_seconds": wall,
        # the whole command's process CPU time (every party: one process), and each epoch's
        # rounds (those that called parties) and its rounds' CPU time, from the engine's records
        "cpu_seconds": cpu,
        "rounds": [e.get("trained_rounds", e["rounds"]) for e in result["epochs"]],
        "epoch_cpu_seconds": [e.get("cpu_seconds", 0.0) for e in result["epochs"]],
        "scores": _scores(report["rows"]),
        "unscored": report.get("unscored", 0),
        "train": result["config"]["train"],
        "epochs": len(result["epochs"]),
        "early_stop": result.get("early_stop"),
        # the observed sets the validation predicts with other heads (TrainConfig.concat_head)
        "heads": (result.get("validation_choice") or {}).get("heads", []),
        # the pooled choice's candidates: LASER-VFL's heads, then the other heads trained
        "pooled": (result.get("validation_choice") or {}).get("pooled", []),
        "command": "vfl " + " ".join(args),
        "printed": printed.getvalue(),
        "curve": _curve(run_dir / "epochs.jsonl") if curve_every else [],
    }


def _curve(path: Path) -> list[dict[str, Any]]:
    """The test scores logged during training: epoch (1-based) and metrics."""
    out = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if "test" in entry:
            test = {k: entry["test"][k] for k in METRIC_KEYS if k in entry["test"]}
            out.append({"epoch": entry["epoch"] + 1, **test})
    return out


def _scores(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The federation's result rows by observed set ("all" included)."""
    return {r["observed"]: {k: r[k] for k in METRIC_KEYS if k in r} for r in rows}


def grpc_row(prep: Prepared, workdir: Path, epochs: int | None) -> Row:
    """The federation over gRPC, real processes on loopback; `seconds` from the coordinator's
    start to its exit (process start-up included)."""
    coordinator = ["--seed", str(prep.seed)]
    coordinator += ["--epochs", str(epochs)] if epochs is not None else []
    start = time.perf_counter()
    with procs.federation(
        prep.split.paths, workdir, coordinator, network=_client_args(prep)
    ) as out:
        pass
    seconds = time.perf_counter() - start
    result = procs.results(out)
    return {
        "row": "federation_grpc",
        "seconds": seconds,
        "scores": _scores(result["test"]["rows"]),
        "unscored": result["test"].get("unscored", 0),
        "epochs": len(result["epochs"]),
        "early_stop": result.get("early_stop"),
        "rounds": [e.get("trained_rounds", e["rounds"]) for e in result["epochs"]],
    }


def _client_args(prep: Prepared) -> Callable[[int, int], list[str]]:
    """procs.federation's per-client options: loopback plus what a party's table needs."""

    def args(k: int, port: int) -> list[str]:
        out = ["--coordinator", f"127.0.0.1:{port}", "--listen", "127.0.0.1:0"]
        return out + table_client_args(prep, k)

    return args


def table_client_args(prep: Prepared, k: int) -> list[str]:
    """The `vfl-client` options party k's CSV needs (its ID column, its block, the labels at
    the label party; the task or the class count), whatever network it reaches the
    coordinator over (benchmarks.wan.tables shapes it)."""
    out = ["--id-column", ID_COLUMN, "--block", str(k), "--clients", str(len(prep.split.paths))]
    if k == LABEL_BLOCK:
        out += ["--label-column", LABEL_COLUMN]
    if prep.task == REGRESSION:
        out += ["--task", REGRESSION]
    elif k != LABEL_BLOCK:
        out += ["--num-classes", str(len(prep.classes))]
    return out
