"""The settings the tabular defaults were chosen from (issue 27): each setting is `vfl simulate`
on the same party CSVs as `vfl bench tabular` (benchmarks.tabular.tables, every table and seed),
with a few options added to the defaults; the federation in process (and, for settings that
name it, the label party alone). Test scores are compared side by side, one run of each
setting per table and seed; the choice is by the mean over every table and seed, never one
table's.

    python -m benchmarks.tabular.sweep --data-path ../shared/data --settings defaults f1 \
        --out benchmarks/results/runs/tabular-sweep
    python -m benchmarks.tabular.sweep --summarise benchmarks/results/runs/tabular-sweep

Each (setting, table, seed) is one cached JSON under `--out` (delete it to rerun).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from benchmarks.pool import Task, read_json, run_tasks
from benchmarks.tabular.rows import central_row, hgb_row, lgbm_row, linear_row, simulate_row
from benchmarks.tabular.tables import LABEL_BLOCK, K, prepare, tables
from vfl_core.config import TrainConfig
from vfl_core.methods.registry import REGISTRY, register
from vfl_core.methods.spec import MethodSpec

# setting -> the options it adds to the defaults; "+alone" also runs the label party alone.
SETTINGS: dict[str, list[str]] = {
    "defaults": [],
    "defaults+alone": [],
    "f1": ["--threshold", "f1"],
    "f1+alone": ["--threshold", "f1"],
    "t0.5": ["--threshold", "0.5"],
    # the decision threshold by other rules than the best validation accuracy's argmax
    # (vfl_core.inference.choice: one standard error over 0.5; Platt scaling)
    "t-accuracy": ["--threshold", "accuracy"],
    "t-se": ["--threshold", "accuracy-1se"],
    "t-platt": ["--threshold", "platt"],
    "head-mlp": ["--head", "mlp"],
    "own-sets": ["--no-serve-feature-only"],
    "wd1e-3": ["--weight-decay", "1e-3"],
    "hidden128x2": ["--hidden", "128,128"],
    "cosine": ["--scheduler", "cosine"],
    "patience-always": ["--early-stop-patience", "5"],
    # fewer epochs where a table is too small for a validation split (no early stopping)
    "epochs16": ["--epochs", "16"],
    "epochs20": ["--epochs", "20"],
    "epochs30": ["--epochs", "30"],
    "lr3e-3": ["--lr", "3e-3"],
    "ple8": [],
    "ple16": [],
    "no-ple": [],
    "ple8-head-mlp": ["--head", "mlp"],
    "head-linear": ["--head", "linear"],
    "wide": ["--head", "wide"],
    "resample": ["--balance", "resample"],
    "wide-resample": ["--head", "wide", "--balance", "resample"],
    "patience10": ["--early-stop-patience", "10"],
    "wide-wd1e-3": ["--head", "wide", "--weight-decay", "1e-3"],
    "batch32": ["--batch-size", "32"],
    "val0.2": ["--validation-fraction", "0.2"],
    "wide-val0.2": ["--head", "wide", "--validation-fraction", "0.2"],
    "batch128": ["--batch-size", "128"],
    "hidden512": ["--hidden", "512"],
    "subset-plain": ["--subset-choice", "plain"],
    "dropout0.1": ["--dropout", "0.1"],
    "dropout0.2": ["--dropout", "0.2"],
    "layernorm": ["--norm", "layer"],
    "batchnorm": ["--norm", "batch"],
    "catdim2": ["--categorical-dim", "2"],
    "catdim16": ["--categorical-dim", "16"],
    "onehot64": ["--max-onehot", "64"],
    "wide-onehot64": ["--head", "wide", "--max-onehot", "64"],
    "patience10-where-on": [],
    "smooth0.1": ["--label-smoothing", "0.1"],
    "batchnorm-dropout0.2": ["--norm", "batch", "--dropout", "0.2"],
    "batchnorm-cosine": ["--norm", "batch", "--scheduler", "cosine"],
    "dropout0.2-cosine": ["--dropout", "0.2", "--scheduler", "cosine"],
    "embed128": ["--embed-dim", "128"],
    "head-hidden256": ["--head-hidden", "256"],
    # issue 27's ablation of the generated tables' gap: concatenating fusions (the baselines of
    # LASER-VFL's paper) instead of LASER-VFL's mean of embeddings, and full overlap
    "zerofill": ["--method", "zerofill"],
    "plug": ["--method", "plug"],
    "svfl": ["--method", "svfl"],
    "combinatorial": ["--method", "combinatorial"],
    "full-overlap": [],
    "zerofill-full-overlap": ["--method", "zerofill"],
    "laser-concat": ["--method", "laser-concat"],  # `laser_concat` below, not built in
    # LASER-VFL's heads and a zero-filled concatenating head on the same towers, chosen per
    # observed set on validation (TrainConfig.concat_head)
    "concat-head": ["--concat-head", "--concat-choice", "sets"],
    "concat-head-all": ["--concat-head", "--concat-choice", "all"],
    # LASER-VFL's heads alone (the tables' default before the concatenating head was)
    "no-concat-head": ["--no-concat-head"],
    "concat-head-all-accuracy": ["--concat-head", "--concat-choice", "all"],
    "concat-head-all-best": ["--concat-head", "--concat-choice", "all", "--subset-choice", "best"],
    "concat-head-always": ["--concat-head", "--concat-choice", "sets"],
    "concat-head-never": ["--concat-head", "--concat-choice", "sets"],
    # issue 45's item 3: a stratified validation split, alone and with the concatenating head,
    # and the log target of a regression (always; where the training targets are skewed)
    "stratified": ["--validation-split", "stratified"],
    "concat-stratified": [
        "--concat-head",
        "--concat-choice",
        "sets",
        "--validation-split",
        "stratified",
    ],
    "log-target": ["--target-transform", "log"],
    "log-auto": ["--target-transform", "auto"],
    # issue 27, the QA tables (gen_wide: 67 columns a party on ~720 rows; gen_multiclass)
    "hidden64": ["--hidden", "64"],
    "hidden32": ["--hidden", "32"],
    "wd1e-2": ["--weight-decay", "1e-2"],
    "dropout0.5": ["--dropout", "0.5"],
    "embed16": ["--embed-dim", "16"],
    "hidden64-dropout0.2": ["--hidden", "64", "--dropout", "0.2"],
    "val-on": ["--early-stop-patience", "10"],
    "val0.2-on": ["--early-stop-patience", "10", "--validation-fraction", "0.2"],
    "patience20": ["--early-stop-patience", "20"],
    "dropout0.7": ["--dropout", "0.7"],
    "wd1e-1": ["--weight-decay", "1e-1"],
    "dropout0.5-wd1e-2": ["--dropout", "0.5", "--weight-decay", "1e-2"],
    "dropout0.5-head-linear": ["--dropout", "0.5", "--head", "linear"],
    "wd3e-2": ["--weight-decay", "3e-2"],
    "wd3e-1": ["--weight-decay", "3e-1"],
    "wd1": ["--weight-decay", "1"],
    # issue 43: time to a model. "today": the defaults before it, given explicitly (batch 64,
    # lr 1e-3, cosine to the 60-epoch ceiling, patience 10, any gain resets it); the others
    # (rRR-lrLR-hlHL-pP[-miMI]) set the batch rule (ROUNDS_PER_EPOCH: rows / RR), the rate,
    # the decay's half-life (HALF_LIFE; "const": none), the patience (AUTO_PATIENCE) and the
    # minimum improvement (1 % where unnamed)
    "today": [
        *("--batch-size", "64", "--lr", "1e-3", "--scheduler", "cosine"),
        *("--min-improvement", "0"),
    ],
    # ... as it ran then, now that the tables' rounds are stale by default: exact rounds and the
    # patience of 10 the tables had then
    "today-exact": [
        *("--batch-size", "64", "--lr", "1e-3", "--scheduler", "cosine"),
        *("--min-improvement", "0", "--staleness", "0", "--early-stop-patience", "10"),
    ],
    # evaluation on each party's exponential moving average of its weights, decay per step
    # (a round steps each tower and head about once; an epoch of a table is about 4-5 rounds)
    "ema0.8": ["--weight-average", "ema", "--ema-decay", "0.8"],
    "ema0.9": ["--weight-average", "ema", "--ema-decay", "0.9"],
    "ema0.97": ["--weight-average", "ema", "--ema-decay", "0.97"],
    "r16-lr3e-3-hl4-p5": ["--lr", "3e-3"],
    "r16-lr3e-3-hl4-p3": ["--lr", "3e-3"],
    "r16-lr1e-2-hl4-p3": ["--lr", "1e-2"],
    "r8-lr1e-2-hl4-p3": ["--lr", "1e-2"],
    "r16-lr3e-3-const-p3": ["--lr", "3e-3", "--scheduler", "none"],
    "r8-lr1e-2-hl4-p5-mi0.002": ["--lr", "1e-2", "--min-improvement", "0.002"],
    "r8-lr3e-3-hl8-p5-mi0.002": ["--lr", "3e-3", "--min-improvement", "0.002"],
    "r4-lr1e-2-hl8-p6-mi0.002": ["--lr", "1e-2", "--min-improvement", "0.002"],
    "r16-lr3e-3-hl4-p5-mi0.002": ["--lr", "3e-3", "--min-improvement", "0.002"],
    "r4-lr1e-2-hl8-p5-mi0.002": ["--lr", "1e-2", "--min-improvement", "0.002"],
    "r4-lr1e-2-hl8-p6-mi0.01": ["--lr", "1e-2", "--min-improvement", "0.01"],
    "r4-lr3e-3-hl8-p6-mi0.002": ["--lr", "3e-3", "--min-improvement", "0.002"],
    "r4-lr1e-2-hl16-p6-mi0.002": ["--lr", "1e-2", "--min-improvement", "0.002"],
    "r4-lr1e-2-hl12-p6-mi0.01": ["--lr", "1e-2", "--min-improvement", "0.01"],
    "r4-lr1e-2-hl16-p8-mi0.01": ["--lr", "1e-2", "--min-improvement", "0.01"],
    "r4-lr1e-2-hl16-p6-mi0.01": ["--lr", "1e-2", "--min-improvement", "0.01"],
    "r4-lr1e-2-hl6-p6-mi0.01": ["--lr", "1e-2", "--min-improvement", "0.01"],
    "r4-lr1e-2-hl4-p6-mi0.01": ["--lr", "1e-2", "--min-improvement", "0.01"],
    "r4-lr2e-2-hl8-p6-mi0.01": ["--lr", "2e-2", "--min-improvement", "0.01"],
    # the defaults with the linear scaling rule for the "auto" rate (vfl_core.config
    # SCALED_TABLE_LR: 0.001 x batch / 64 from each party's own training rows, at most 0.01)
    "lr-linear-scaling": [],
    # issue 45: numeric embeddings inside each party and TabM-mini ensembles (model.num_embedding,
    # model.ensemble), on the code's defaults otherwise
    "ple": ["--num-embedding", "ple"],
    "periodic": ["--num-embedding", "periodic"],
    "ens4": ["--ensemble", "4"],
    "ple-ens4": ["--num-embedding", "ple", "--ensemble", "4"],
    "ens4-embed128": ["--ensemble", "4", "--embed-dim", "128"],
    "ple8-d8": ["--num-embedding", "ple", "--num-bins", "8", "--num-embedding-dim", "8"],
    "periodic-ens4": ["--num-embedding", "periodic", "--ensemble", "4"],
    "ens2": ["--ensemble", "2"],
    # issue 45: how categorical columns are encoded: a learned embedding per category for every
    # categorical column (--max-onehot 1) instead of one-hot up to 16 values, its width the
    # default rule or fixed; and a wider head on the mean (the fusion's capacity)
    "catemb": ["--max-onehot", "1"],
    "catemb-d8": ["--max-onehot", "1", "--categorical-dim", "8"],
    "catemb-d2": ["--max-onehot", "1", "--categorical-dim", "2"],
    "ens4-head256": ["--ensemble", "4", "--head-hidden", "256"],
    "catemb-ens4": ["--max-onehot", "1", "--ensemble", "4"],
    # no federation: HistGradientBoosting and LightGBM (defaults) on the joined columns of the
    # same party CSVs, with the process CPU seconds of each fit
    "gbdt": [],
    # the defaults with a warm-up (wuW: vfl_core.model.lr_schedule.DECAY_WARMUP epochs), another
    # rate, patience, and local updates (R = 4; lrS: LOCAL_LR_SCALE, the local steps' share of
    # the rate)
    "r4-lr1e-2-hl16-p6-mi0.01-wu3": ["--lr", "1e-2", "--min-improvement", "0.01"],
    "r4-lr1e-2-hl16-p6-mi0.01-wu5": ["--lr", "1e-2", "--min-improvement", "0.01"],
    "r4-lr5e-3-hl16-p6-mi0.01": ["--lr", "5e-3", "--min-improvement", "0.01"],
    "r4-lr1e-2-hl16-p5-mi0.01": ["--lr", "1e-2", "--min-improvement", "0.01"],
    "local4": ["--local-steps", "4"],
    "local4-lr1": ["--local-steps", "4"],
    "local4-lr0.5": ["--local-steps", "4"],
    "local4-lr0.25": ["--local-steps", "4"],
    "r4-lr5e-3-hl16-p6-mi0.01-local4": [
        *("--lr", "5e-3", "--min-improvement", "0.01", "--local-steps", "4"),
    ],
    # issue 43: the recipe that keeps a table's time to a model over a 50 ms link near its time
    # at RTT 0 (benchmarks/results/wan.md): bounded staleness with early stopping's verdict off
    # the critical path, and with the blocks running on across an epoch's end
    "stale3": ["--staleness", "3", "--overlap-validation"],
    "stale3-flow": ["--staleness", "3", "--overlap-validation", "--epoch-flow"],
    "stale5-flow": ["--staleness", "5", "--overlap-validation", "--epoch-flow"],
    # exact rounds where the tables' defaults are the recipe above (vfl_core.auto_rounds)
    "exact": ["--staleness", "0"],
    # the recipe with early stopping's patience of exact rounds (the stale runs' default is
    # vfl_core.config.AUTO_STALE_PATIENCE)
    "stale3-p6": ["--staleness", "3", "--overlap-validation", "--early-stop-patience", "6"],
    # the tables' earlier defaults (staleness 3, the late verdict) with the label party's own
    # tower exact (the tables' defaults now: `defaults`, the recipe below)
    "fresh-own": ["--staleness", "3", "--overlap-validation", "--fresh-own-tower"],
    # ... and with staleness 5 and the blocks running on across the epoch's end
    "fresh-own-s5-flow": [
        *("--staleness", "5", "--overlap-validation", "--epoch-flow", "--fresh-own-tower"),
    ],
    # the defaults with early stopping's patience 8 under their staleness (STALE_PATIENCE)
    "stale-p8": [],
    # the linear model penalised by the towers' weight decay: the defaults before it had its own
    "lanewd1e-4": ["--lane-weight-decay", "1e-4"],
    # the defaults before every training row weighed the same (benchmarks.tabular.vertibench)
    "round-mean": ["--round-loss", "mean", "--unvalidated-heads", "laser"],
    # the heads' blend where nothing is held out for classes too (the defaults: regressions)
    "unvalidated-blend": ["--unvalidated-heads", "blend"],
}
# settings that change a default no option reaches yet: vfl_core.data.preprocess's numeric bins
NUMERIC_BINS: dict[str, int] = {"ple8": 8, "ple16": 16, "no-ple": 0, "ple8-head-mlp": 8}
# ... and vfl_core.config's AUTO_PATIENCE: the patience where early stopping is on by default
# (validation share of 100 samples or more), leaving it off on the small tables
AUTO_PATIENCE: dict[str, int] = {
    "patience10-where-on": 10,
    "today": 10,
    "r16-lr3e-3-hl4-p5": 5,
    **{
        s: 3
        for s in (
            "r16-lr3e-3-hl4-p3",
            "r16-lr1e-2-hl4-p3",
            "r8-lr1e-2-hl4-p3",
            "r16-lr3e-3-const-p3",
        )
    },
    "r8-lr1e-2-hl4-p5-mi0.002": 5,
    "r8-lr3e-3-hl8-p5-mi0.002": 5,
    "r4-lr1e-2-hl8-p6-mi0.002": 6,
    "r16-lr3e-3-hl4-p5-mi0.002": 5,
    "r4-lr1e-2-hl8-p5-mi0.002": 5,
    "r4-lr1e-2-hl8-p6-mi0.01": 6,
    "r4-lr3e-3-hl8-p6-mi0.002": 6,
    "r4-lr1e-2-hl16-p6-mi0.002": 6,
    "r4-lr1e-2-hl12-p6-mi0.01": 6,
    "r4-lr1e-2-hl16-p8-mi0.01": 8,
    "r4-lr1e-2-hl16-p6-mi0.01": 6,
    "r4-lr1e-2-hl6-p6-mi0.01": 6,
    "r4-lr1e-2-hl4-p6-mi0.01": 6,
    "r4-lr2e-2-hl8-p6-mi0.01": 6,
    "r4-lr1e-2-hl16-p6-mi0.01-wu3": 6,
    "r4-lr1e-2-hl16-p6-mi0.01-wu5": 6,
    "r4-lr5e-3-hl16-p6-mi0.01": 6,
    "r4-lr1e-2-hl16-p5-mi0.01": 5,
    "r4-lr5e-3-hl16-p6-mi0.01-local4": 6,
}
# ... and vfl_core.config's AUTO_STALE_PATIENCE: the patience where early stopping is on by
# default and the rounds are stale (the tables' defaults)
STALE_PATIENCE: dict[str, int] = {"stale-p8": 8}
# ... and vfl_core.config's SCALED_TABLE_LR: the "auto" rate of a table follows the party's batch
SCALED_LR: set[str] = {"lr-linear-scaling"}
# ... and vfl_core.config's AUTO_ROUNDS_PER_EPOCH (the "auto" batch: training rows / this) and
# vfl_core.model.lr_schedule's DECAY_HALF_LIFE (epochs), named in the setting (r8, hl2, ...)
ROUNDS_PER_EPOCH: dict[str, int] = {
    s: int(s.split("-")[0][1:]) for s in SETTINGS if s.startswith("r") and s[1].isdigit()
}
HALF_LIFE: dict[str, float] = {
    s: float(p[2:]) for s in ROUNDS_PER_EPOCH for p in s.split("-") if p.startswith("hl")
}
WARMUP: dict[str, int] = {
    s: int(p[2:]) for s in ROUNDS_PER_EPOCH for p in s.split("-") if p.startswith("wu")
}
# ... and vfl_core.methods.laser.local_steps's LOCAL_LR_SCALE
LOCAL_LR: dict[str, float] = {
    "local4-lr1": 1.0,
    "local4-lr0.5": 0.5,
    "local4-lr0.25": 0.25,
    "r4-lr5e-3-hl16-p6-mi0.01-local4": 1.0,
}
# ... and the rows the parties hold (benchmarks.tabular.tables.write_parties): "full", every party
# holds party 0's rows; such a setting also runs the centralised baselines on its own data
OVERLAP: dict[str, str] = {"full-overlap": "full", "zerofill-full-overlap": "full"}
# ... and the validation choice's rule for the concatenating head (vfl_core.inference.choice), a
# fixed one instead: "always" predicts every observed set that holds the label party with it
# (whatever validation says), "never" chooses among LASER-VFL's subsets only (both trained as
# `concat-head`: what the choice gains or costs against either fixed head)
CONCAT_RULE: dict[str, str] = {"concat-head-always": "always", "concat-head-never": "never"}
# ... and the metric the validation choice compares binary tasks' candidates by (Brier score by
# default, vfl_core.inference.headline.watched): the test tables are judged by the accuracy
CHOICE_METRIC: dict[str, str] = {"concat-head-all-accuracy": "accuracy"}
SEEDS = (0, 1, 2)


def describe(name: str) -> str:
    """What a setting changes from the defaults, in words."""
    said = " ".join(SETTINGS[name])
    if name in NUMERIC_BINS:
        said += f" numeric bins (PLE) {NUMERIC_BINS[name]}"
    if name in AUTO_PATIENCE:
        said += f" patience {AUTO_PATIENCE[name]} where early stopping is on by default"
    if name in STALE_PATIENCE:
        said += (
            f" patience {STALE_PATIENCE[name]} where early stopping is on by default with staleness"
        )
    if name in ROUNDS_PER_EPOCH:
        said += f" batch auto at {ROUNDS_PER_EPOCH[name]} rounds an epoch"
    if name in HALF_LIFE:
        said += f" decay half-life {HALF_LIFE[name]:g} epochs"
    if name in WARMUP:
        said += f" warm-up {WARMUP[name]} epochs"
    if name in LOCAL_LR:
        said += f" local steps at {LOCAL_LR[name]:g} of the rate"
    if name in OVERLAP:
        said += f" {OVERLAP[name]} overlap (every party holds the label party's rows)"
    if name in CHOICE_METRIC:
        said += f" (the validation choice by {CHOICE_METRIC[name]})"
    if name in CONCAT_RULE:
        said += (
            f" (the concatenating head {CONCAT_RULE[name]} chosen: a fixed rule, not validation's)"
        )
    return said.strip() or "the defaults"


def worker(payload: dict[str, Any]) -> dict[str, Any]:
    data_path = Path(payload["data_path"]) if payload["data_path"] else None
    table = tables(data_path, False, extra=True)[payload["table"]](payload["seed"], False)
    extra = list(payload["extra"])
    if "laser-concat" in extra:
        register(laser_concat())  # a no-op where this process registered it already
    _set_module_defaults(payload)
    overlap = payload.get("overlap") or "partial"
    if payload.get("gbdt"):
        return {"task": table.task, "rows_run": _gbdt_rows(table, payload["seed"])}
    with tempfile.TemporaryDirectory(prefix="vfl-tabular-sweep-") as tmp:
        prep = prepare(table, payload["seed"], Path(tmp) / "parties", overlap)
        rows = [_row("federation", prep, list(range(K)), Path(tmp) / "fed.json", extra)]
        if payload["alone"]:
            rows.append(_row("label_alone", prep, [LABEL_BLOCK], Path(tmp) / "a.json", extra))
        if overlap != "partial":  # the benchmark's baselines ran on other data: run them here
            train = TrainConfig.model_validate(rows[0]["train"])
            rows += [linear_row(prep), hgb_row(prep), central_row(prep, train)]
    return {"task": table.task, "rows_run": rows}


def _gbdt_rows(table: Any, seed: int) -> list[dict[str, Any]]:
    """The gradient-boosting rows of a `gbdt` setting, each with the CPU seconds of its fit."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="vfl-tabular-sweep-") as tmp:
        prep = prepare(table, seed, Path(tmp) / "parties", "partial")
        for fit in (hgb_row, lgbm_row):
            start = time.process_time()
            row = fit(prep)
            rows.append({**row, "cpu_seconds": time.process_time() - start})
    return rows


LASER_CONCAT = "laser-concat"


@functools.cache
def laser_concat() -> MethodSpec:
    """`laser-concat`, a method for one ablation (issue 27; the report's ablation section), not
    the paper's and not built in: LASER-VFL's objective, subset choice and heads, with each head
    on the concatenation of all K embeddings, zeros where a block is outside the subset (the
    fusion the split-learning baselines use), instead of their mean. A run that names it
    registers it (vfl_core.methods.registry.register); not servable from bundles
    (vfl_core.serving.bundle). One spec per process: registering it again is a no-op."""
    laser = REGISTRY["laser"]
    name = "LASER-VFL (concatenation)"
    return dataclasses.replace(laser, name=LASER_CONCAT, display_name=name, fusion="concat")


def _set_module_defaults(payload: dict[str, Any]) -> None:
    """The module-level defaults a setting changes, and back to the code's for the others (a
    pool process runs several tasks in turn)."""
    from vfl_core import config
    from vfl_core.data import preprocess
    from vfl_core.inference import choice
    from vfl_core.methods.laser import local_steps
    from vfl_core.model import lr_schedule

    original = _ORIGINAL.setdefault(
        "",
        (
            preprocess.DEFAULT_NUMERIC_BINS,
            config.AUTO_PATIENCE,
            config.AUTO_ROUNDS_PER_EPOCH,
            lr_schedule.DECAY_HALF_LIFE,
            config.SCALED_TABLE_LR,
            lr_schedule.DECAY_WARMUP,
            local_steps.LOCAL_LR_SCALE,
            config.AUTO_STALE_PATIENCE,
        ),
    )
    bins, patience = payload.get("numeric_bins"), payload.get("auto_patience")
    preprocess.DEFAULT_NUMERIC_BINS = original[0] if bins is None else bins
    config.AUTO_PATIENCE = original[1] if patience is None else patience
    per_epoch, half_life = payload.get("rounds_per_epoch"), payload.get("half_life")
    config.AUTO_ROUNDS_PER_EPOCH = original[2] if per_epoch is None else per_epoch
    lr_schedule.DECAY_HALF_LIFE = original[3] if half_life is None else half_life
    scaled = payload.get("scaled_lr")
    config.SCALED_TABLE_LR = original[4] if scaled is None else scaled
    warmup, local_lr = payload.get("warmup"), payload.get("local_lr")
    lr_schedule.DECAY_WARMUP = original[5] if warmup is None else warmup
    local_steps.LOCAL_LR_SCALE = original[6] if local_lr is None else local_lr
    stale_patience = payload.get("stale_patience")
    config.AUTO_STALE_PATIENCE = original[7] if stale_patience is None else stale_patience
    rule = _CHOICE.setdefault(
        "", (choice.best_candidate, choice.MIN_CHOICE_SAMPLES, choice.watched)
    )
    fixed = payload.get("concat_rule")
    choice.best_candidate = rule[0] if fixed is None else _fixed_head(fixed, rule[0])
    choice.MIN_CHOICE_SAMPLES = 1 if fixed == "always" else rule[1]
    metric = payload.get("choice_metric")
    choice.watched = rule[2] if metric is None else _watched(metric, rule[2])


def _watched(metric: str, default: Callable[[str, int], str]) -> Callable[[str, int], str]:
    """`choice.watched` with `metric` for classification tasks (regression keeps RMSE)."""

    def key(task: str, num_classes: int) -> str:
        return default(task, num_classes) if task == "regression" else metric

    return key


def _fixed_head(rule: str, chooser: Callable[..., Any]) -> Callable[..., Any]:
    """A `choice.best_candidate` with a fixed rule for the concatenating head: its candidate
    wherever there is one ("always", scores ignored), or never (`chooser` among the others)."""

    def best(cands: list[Any], lower: bool, margin: bool = True) -> Any:
        concat = [c for c in cands if c.head]
        if rule == "always":
            return concat[0] if concat else cands[0]
        return chooser([c for c in cands if not c.head], lower, margin)

    return best


_ORIGINAL: dict[str, tuple[Any, ...]] = {}  # the code's own values, read before any change
_CHOICE: dict[str, tuple[Any, ...]] = {}  # vfl_core.inference.choice's own


def _row(name: str, prep: Any, parties: list[int], out: Path, extra: list[str]) -> dict:
    # the test curve of every epoch (a diagnostic: training is the same without it) for the
    # rounds to within 0.2 points of the model (`summarise_rounds`, below)
    return simulate_row(name, prep, parties, out, None, curve_every=1, extra=tuple(extra))


def setting_payload(setting: str) -> dict[str, Any]:
    """What a sweep run of `setting` changes: the options, the label party alone beside it, and
    the module defaults no option reaches."""
    return {
        "extra": SETTINGS[setting],
        "alone": setting.endswith("+alone"),
        "numeric_bins": NUMERIC_BINS.get(setting),
        "auto_patience": AUTO_PATIENCE.get(setting),
        "stale_patience": STALE_PATIENCE.get(setting),
        "rounds_per_epoch": ROUNDS_PER_EPOCH.get(setting),
        "half_life": HALF_LIFE.get(setting),
        "scaled_lr": True if setting in SCALED_LR else None,
        "warmup": WARMUP.get(setting),
        "local_lr": LOCAL_LR.get(setting),
        "overlap": OVERLAP.get(setting),
        "concat_rule": CONCAT_RULE.get(setting),
        "choice_metric": CHOICE_METRIC.get(setting),
        "gbdt": setting == "gbdt",
    }


def grid_tasks(args: argparse.Namespace, payload: Callable[[str], dict[str, Any]]) -> list[Task]:
    """A task per (setting, table, seed) of the command line, cached as
    --out/SETTING/TABLE-sSEED.json; `payload` gives each setting's own fields."""
    names = args.tables or list(tables(args.data_path, False))
    data_path = str(args.data_path) if args.data_path else None
    out = []
    for setting in args.settings:
        for table in names:
            for seed in args.seeds:
                fields = {"table": table, "seed": seed, "data_path": data_path, **payload(setting)}
                path = args.out / setting / f"{table}-s{seed}.json"
                out.append(Task(f"{setting} {table} s{seed}", fields, path))
    return out


Scores = dict[tuple[str, str], dict[int, float]]  # (row, table) -> seed -> accuracy % or RMSE


def summarise(root: Path, baselines: Path, observed: str = "all") -> str:
    """Per setting: mean test accuracy (RMSE) per table over the seeds, and against the
    defaults run by run (same table and seed): how many runs it is better, worse or equal in.
    The baselines of `vfl bench tabular` (linear, hgb, central_mlp) on the same tables and
    seeds are listed beside them in brackets. `observed`: score the test rows of that observed
    set ("0,1,2") instead of all (a run without such rows is left out)."""
    scores: Scores = {}
    metrics: dict[str, str] = {}
    for path in sorted(root.glob("*/*.json")):
        run = read_json(path)
        if run is None:
            continue
        table, seed = path.stem.rsplit("-s", 1)
        metric = metrics.setdefault(table, "rmse" if run["task"] == "regression" else "accuracy")
        for row in run["rows_run"]:
            name = path.parent.name.removesuffix("+alone") + _suffix(row["row"])
            if observed in row["scores"]:
                scores.setdefault((name, table), {})[int(seed)] = _value(row, metric, observed)
    # Where no "defaults" setting ran a table here, the benchmark's own federation and
    # label_alone rows are its defaults (the same command on the same CSVs).
    own = {"federation": "defaults", "label_alone": "defaults (label party alone)"}
    for table, metric in metrics.items():
        reference = not any((name, table) in scores for name in own.values())
        for path in sorted(baselines.glob(f"{table}-s*-local.json")):
            run = read_json(path) or {"rows_run": [], "payload": {}}
            for row in run["rows_run"]:
                if row["row"] in ("linear", "hgb", "central_mlp"):
                    key = (f"[{row['row']}]", table)
                elif reference and row["row"] in own:
                    key = (own[row["row"]], table)
                else:
                    continue
                if observed in row["scores"]:
                    value = _value(row, metric, observed)
                    scores.setdefault(key, {})[run["payload"]["seed"]] = value
    names = sorted({n for n, _ in scores}, key=lambda n: (n.startswith("["), n))
    header = " | ".join(f"{t} ({m})" for t, m in metrics.items())
    lines = [
        f"| setting | {header} | runs better / worse / equal than defaults |",
        "| --- " * (len(metrics) + 2) + "|",
    ]
    for name in names:
        cells = [_cell(scores.get((name, t), {})) for t in metrics]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_paired(scores, name, metrics)} |")
    return "\n".join(lines)


def _suffix(row: str) -> str:
    """A row's name beside its setting's: none for the federation."""
    if row == "federation":
        return ""
    return " (label party alone)" if row == "label_alone" else f" [{row}]"


def _value(row: dict[str, Any], metric: str, observed: str = "all") -> float:
    value = float(row["scores"][observed][metric])
    return value if metric == "rmse" else 100 * value


def _cell(values: dict[int, float]) -> str:
    if not values:
        return "-"
    v = list(values.values())
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    return f"{statistics.mean(v):.2f} ± {sd:.2f}" + ("" if len(v) == 3 else f" ({len(v)})")


def _paired(scores: Scores, name: str, metrics: dict[str, str]) -> str:
    """Runs (table, seed) where `name` is better / worse / equal than the defaults."""
    if name.startswith("["):
        return ""
    base = "defaults (label party alone)" if name.endswith("alone)") else "defaults"
    if name.endswith("]"):  # a baseline run on a setting's own data, against the benchmark's
        base = name[name.index(" [") + 1 :]
    if name == base:
        return ""
    better = worse = equal = 0
    for table, metric in metrics.items():
        mine, ref = scores.get((name, table), {}), scores.get((base, table), {})
        for seed in sorted(set(mine) & set(ref)):
            gain = (mine[seed] - ref[seed]) * (-1 if metric == "rmse" else 1)
            better, worse = better + (gain > 1e-9), worse + (gain < -1e-9)
            equal += abs(gain) <= 1e-9
    return f"{better} / {worse} / {equal}"


def run_cli(
    settings: Iterable[str],
    worker: Callable[[dict[str, Any]], dict[str, Any]],
    payload: Callable[[str], dict[str, Any]],
    out: Path,
    what: str,
    doc: str,
) -> None:
    """The command line of a settings sweep:
    run the (setting, table, seed) tasks not cached under --out (`payload`: a setting's own
    fields of a task), or --summarise a directory."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--data-path", type=Path)
    parser.add_argument("--settings", nargs="*", default=["defaults"], choices=list(settings))
    parser.add_argument("--tables", nargs="*")
    parser.add_argument("--seeds", nargs="*", type=int, default=list(SEEDS))
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--summarise", type=Path)
    parser.add_argument("--baselines", type=Path, default=Path("benchmarks/results/runs/tabular"))
    parser.add_argument("--observed", default="all", help="--summarise one observed set: 0,1,2")
    parser.add_argument(
        "--rounds", action="store_true", help="--summarise rounds and CPU s to the model"
    )
    parser.add_argument(
        "--reference", default="today", help="--rounds: the setting the rounds are compared to"
    )
    args = parser.parse_args()
    if args.summarise and args.rounds:
        print(summarise_rounds(args.summarise, args.reference))
        return
    if args.summarise:
        print(summarise(args.summarise, args.baselines, args.observed))
        return
    tasks = grid_tasks(args, payload)
    failed = run_tasks(worker, tasks, args.jobs, desc=f"{what} runs", progress=False)
    if failed:
        raise SystemExit(f"failed: {failed}")


def main() -> None:
    out = Path("benchmarks/results/runs/tabular-sweep")
    run_cli(SETTINGS, worker, setting_payload, out, "sweep", __doc__)


# -------------------------------------------------------------------------- rounds to the model
# Rounds and CPU seconds to the model, per table and setting, from the runs of
# this sweep (`--summarise DIR --rounds`): what a user over a WAN waits for (every
# round crosses the network) beside the test quality.
#
# Per run (one table, setting and seed), from the engine's epoch records (`vfl simulate`'s
# results.json, with `--eval-every 1` for the test curve, a diagnostic that trains nothing):
#
# - *to the model*: every epoch the run trained (early stopping's wait after the best epoch
#   included: the model is there when training ends), its rounds that called parties and the
#   process CPU seconds of those rounds (in process: every party's);
# - *to within 0.2 points*: up to the first epoch whose test accuracy is within 0.2 points of
#   the model's (the best epoch's, before the validation choice; regression: an RMSE within 0.2 %
#   of the model's).

# classification: test accuracy within this many points (of 100); regression: RMSE within this
# share of the model's
WITHIN_POINTS = 0.2
WITHIN_RMSE_SHARE = 0.002
QUALITY = {
    "classification": (("accuracy", 100), ("f1", 100), ("auc", 100)),
    "regression": (("rmse", 1), ("mae", 1), ("r2", 1)),
}


def to_model(row: dict[str, Any]) -> dict[str, float]:
    """Epochs, rounds and CPU seconds to the model and to within 0.2 points of it (no CPU
    seconds where the row has none: over gRPC they are in other processes)."""
    rounds, cpu = row["rounds"], row.get("epoch_cpu_seconds")
    stop = row.get("early_stop") or {}
    best = stop.get("best_epoch", -1)
    best = best if best >= 0 else len(rounds) - 1  # no early stopping: the last epoch
    out = {
        "epochs": float(len(rounds)),
        "best_epoch": float(best + 1),
        "rounds": float(sum(rounds)),
    }
    if cpu is not None:
        out["cpu"] = float(sum(cpu))
    within = _first_within(row.get("curve") or [], best + 1)
    if within is not None:
        out["rounds_within"] = float(sum(rounds[:within]))
        if cpu is not None:
            out["cpu_within"] = float(sum(cpu[:within]))
    return out


def _first_within(curve: list[dict[str, Any]], best: int) -> int | None:
    """The first epoch (1-based) whose test score is within 0.2 points of epoch `best`'s."""
    by_epoch = {c["epoch"]: c for c in curve}
    if best not in by_epoch:
        return None
    model = by_epoch[best]
    for c in sorted(curve, key=lambda c: c["epoch"]):
        if "rmse" in model:
            if c["rmse"] <= model["rmse"] * (1 + WITHIN_RMSE_SHARE):
                return int(c["epoch"])
        elif 100 * c["accuracy"] >= 100 * model["accuracy"] - WITHIN_POINTS:
            return int(c["epoch"])
    return None


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "-"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {sd:.2f}"


def _mean(values: list[float], digits: int = 0) -> str:
    return f"{statistics.mean(values):.{digits}f}" if values else "-"


def summarise_rounds(root: Path, reference: str = "today") -> str:
    """A markdown table per table: each setting's test quality (mean ± sd over the seeds),
    epochs, rounds and CPU seconds to the model and to within 0.2 points, and its rounds
    against `reference`'s (the same table and seeds)."""
    runs: dict[str, dict[str, list[tuple[dict[str, Any], str]]]] = {}
    fits: dict[str, dict[str, list[dict[str, Any]]]] = {}  # baselines with their CPU seconds
    for path in sorted(root.glob("*/*.json")):
        run = read_json(path)
        if run is None:
            continue
        table = path.stem.rsplit("-s", 1)[0]
        for row in run["rows_run"]:
            if row["row"] == "federation" and "rounds" in row:
                runs.setdefault(table, {}).setdefault(path.parent.name, []).append(
                    (row, run["task"])
                )
            elif "cpu_seconds" in row:
                name = f"{path.parent.name} [{row['row']}]"
                fits.setdefault(table, {}).setdefault(name, []).append(row)
    out = []
    for table in sorted(runs):
        settings = runs[table]
        task = next(iter(settings.values()))[0][1]
        names = [m for m, _ in QUALITY[task]]
        out += [
            f"**{table}** ({len(next(iter(settings.values())))} seeds)",
            "",
            "| setting | "
            + " | ".join(names)
            + " | epochs (best) | rounds to the model | CPU s to the model | rounds to within "
            "0.2 | CPU s to within 0.2 | rounds vs " + reference + " |",
            "| --- " * (len(names) + 7) + "|",
        ]
        ref_rounds = [to_model(r)["rounds"] for r, _ in settings.get(reference, [])]
        for name in sorted(settings, key=lambda n: (n != reference, n)):
            rows = [r for r, _ in settings[name]]
            figures = [to_model(r) for r in rows]
            quality = [
                _mean_sd([scale * r["scores"]["all"][m] for r in rows if m in r["scores"]["all"]])
                for m, scale in QUALITY[task]
            ]
            rounds = [f["rounds"] for f in figures]
            ratio = (
                f"{statistics.mean(ref_rounds) / statistics.mean(rounds):.1f}x fewer"
                if ref_rounds and name != reference
                else ""
            )
            best = _mean([f["best_epoch"] for f in figures], 1)
            epochs = f"{_mean([f['epochs'] for f in figures], 1)} ({best})"
            cells = [
                *quality,
                epochs,
                _mean(rounds),
                _mean([f["cpu"] for f in figures if "cpu" in f], 1),
                _mean([f["rounds_within"] for f in figures if "rounds_within" in f]),
                _mean([f["cpu_within"] for f in figures if "cpu_within" in f], 1),
                ratio,
            ]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        for name, rows in sorted(fits.get(table, {}).items()):
            quality = [
                _mean_sd([scale * r["scores"]["all"][m] for r in rows if m in r["scores"]["all"]])
                for m, scale in QUALITY[task]
            ]
            cpu = _mean([r["cpu_seconds"] for r in rows], 1)
            out.append(f"| {name} | " + " | ".join([*quality, "-", "-", cpu, "-", "-", ""]) + " |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # at the end: main() reads the rounds summary defined above
    main()
