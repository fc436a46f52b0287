"""The centralised rows of `vfl bench tabular`: models on the joined columns of the same split.

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
  federation's shape (benchmarks.tabular_towers; both for benchmarks.tabular_screen).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

from benchmarks.tabular_data import Prepared, party_features, raw_columns
from benchmarks.tabular_metrics import score_sets
from benchmarks.tabular_towers import towers_features, towers_model
from vfl_core.config import AUTO_MIN_VALIDATION, TrainConfig
from vfl_core.data.learning_task import REGRESSION
from vfl_core.model.lr_schedule import lr_at
from vfl_core.model.model_bank import make_optimizer
from vfl_core.model.models import build_head, build_representation

log = logging.getLogger(__name__)

Row = dict[str, Any]
# Learning-rate schedules the central MLP follows as the federation does (model_bank.set_lr);
# another is said in the row's note, not silently replaced.
MIRRORED_SCHEDULES = ("auto", "none", "cosine", "decay")


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


# ---------------------------------------------------------------- the central MLP


@dataclass(frozen=True)
class Fit:
    """How the central MLP trains beyond its TrainConfig (the screen's candidates)."""

    # the validation metric: the federation's (`_quality`) | accuracy | logloss
    watch: str = "federation"
    smoothing: float = 0.0  # label smoothing of the classification loss
    patience: int | None = None  # None: the federation's (TrainConfig.patience and its 100 rule)
    # "": one representation model on the joined features; "mean" | "concat": one per party,
    # fused (benchmarks.tabular_towers), each present feature-only party dropped with `drop`
    towers: str = ""
    drop: float = 0.0
    head_layers: int = 1  # towers only: hidden layers of the head (the federation's has 1)


def central_row(prep: Prepared, train: TrainConfig, fit: Fit = Fit()) -> Row:
    """The federation's model on the joined features, trained like the federation."""
    torch.manual_seed(train.seed)
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
