"""`vfl prepare`: turn a whole data set into K party directories with simulated missing blocks.

One seed fixes everything. Each random purpose (train/test split, train missingness, test
missingness, per-party probabilities) draws from its own stream, so changing one (say the
test p_miss) never reshuffles another (the split or the training rows).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vfl_core import seeding
from vfl_core.data.datasets import Dataset, Layout, split_blocks
from vfl_core.data.missingness import (
    UNLABELLED,
    Mechanism,
    block_means,
    choose_labelled,
    draw_mcar,
    draw_observed,
    mcar,
)
from vfl_core.data.party_dir import PartyData, PartyMeta, PartySplit, save_party_dir
from vfl_core.errors import ConfigError, DataError
from vfl_core.seeding import Stream

log = logging.getLogger(__name__)

PREPARE_FILE = "prepare.json"
# One independent stream per purpose (values fixed in vfl_core.seeding, never renumbered).
_PURPOSES: dict[str, Stream] = {
    "split": Stream.SPLIT,
    "miss_train": Stream.MISSING_TRAIN,
    "miss_test": Stream.MISSING_TEST,
    "p_miss": Stream.NONUNIFORM,
    "labels": Stream.LABELS,
    "aligned_labels": Stream.ALIGNED_LABELS,
}


def seeded_rng(seed: int, purpose: str) -> np.random.Generator:
    """The random stream for one purpose of `vfl prepare`, derived from the single user seed.

    Purposes: "split" (train/test), "miss_train", "miss_test", "p_miss" (Beta(2,2) draws),
    "labels" (which training samples keep their label with --labels), "aligned_labels" (which of
    them are made fully aligned).
    """
    return seeding.rng(seed, _PURPOSES[purpose])


# ---------------------------------------------------------------- missingness


def draw_missingness(n: int, p_miss: Sequence[float], rng: np.random.Generator) -> np.ndarray:
    """Observed mask (n, K): party k independently misses each sample with p_miss[k].

    Rows observed by nobody stay in the mask (all False); the caller drops them, as the
    paper does, and reports how many.
    """
    observed = draw_mcar(n, p_miss, rng)  # (n, K)
    log.debug("missingness: %d of %d rows observed by no party", (~observed.any(1)).sum(), n)
    return observed


def party_p_miss(
    num_blocks: int,
    p_miss: float,
    per_party: Sequence[float] | None,
    nonuniform: bool,
    rng: np.random.Generator,
) -> list[float]:
    """Each party's missing probability: uniform, explicit per party, or Beta(2,2) draws.

    ``nonuniform`` is the paper's option p_miss(k) ~ Beta(2, 2); ``p_miss`` is ignored then.
    """
    if num_blocks < 1:
        raise ConfigError(f"number of parties must be at least 1, got {num_blocks}")
    if per_party is not None and nonuniform:
        raise ConfigError("give per-party probabilities or nonuniform, not both")
    if nonuniform:
        return [float(p) for p in rng.beta(2.0, 2.0, size=num_blocks)]
    if per_party is not None:
        if len(per_party) != num_blocks:
            raise ConfigError(
                f"{len(per_party)} per-party probabilities given for {num_blocks} parties"
            )
        probabilities = [float(p) for p in per_party]
    else:
        probabilities = [float(p_miss)] * num_blocks
    _check_probabilities(probabilities)
    return probabilities


def _check_probabilities(p_miss: Sequence[float]) -> None:
    for p in p_miss:
        if not 0.0 <= p <= 1.0:
            raise ConfigError(f"missing probability must be in [0, 1], got {p}")


# ---------------------------------------------------------------- preparing


def prepare_parties(
    dataset: Dataset,
    out_dir: Path,
    num_blocks: int,
    p_miss_train: list[float],
    p_miss_test: list[float],
    test_fraction: float,
    seed: int,
    layout: Layout = "auto",
    prefix: str = "party",
    label_blocks: list[int] | None = None,
    standardize: bool | None = None,
    mechanisms: Mapping[str, Mechanism] | None = None,
    labels: int | None = None,
    keep_labels: bool = False,
    aligned_labels: int = 0,
) -> list[Path]:
    """Write ``out_dir/<prefix><k>/`` for k < num_blocks and ``out_dir/prepare.json``.

    Party k holds block k of the rows it observes; label_blocks None means every party holds
    labels. With `keep_labels`, a label party keeps the label of a sample whose block it misses
    (a label-only row), for every sample some party observes. Tabular data is standardised (by
    default) with train-split statistics only, so no test information leaks into training.
    ``mechanisms`` ("train"/"test" -> Mechanism, see vfl_core.data.missingness) replaces the MCAR
    probabilities of that split. ``labels`` N keeps the labels of N training samples (drawn
    among those a label party holds, with `keep_labels` among every sample some party holds); the
    others are written as UNLABELLED (-1). ``aligned_labels`` of the N (the DLVM paper's reserve:
    100 tabular, 200 image) are made fully aligned: every party observes them. Returns the party
    directories.
    """
    label_set = _check_prepare_args(
        num_blocks, p_miss_train, p_miss_test, test_fraction, label_blocks
    )
    if standardize is None:
        standardize = dataset.kind == "tabular"
    if labels is not None and dataset.task != "classification":
        raise ConfigError("--labels keeps N class labels: it applies to classification data")
    rows = _train_test_indices(dataset, test_fraction, seed)
    x = _standardized(dataset.x, rows["train"]) if standardize else dataset.x
    chosen = {"train": mcar(p_miss_train), "test": mcar(p_miss_test)} | dict(mechanisms or {})
    if aligned_labels and (labels is None or aligned_labels > labels):
        raise ConfigError(f"{aligned_labels} aligned labels need --labels of at least as many")
    cut = _Cut(
        dataset,
        x,
        rows,
        chosen,
        num_blocks,
        seed,
        layout,
        label_set,
        labels,
        keep_labels,
        aligned_labels,
    )
    parties, counts = _cut_parties(cut)
    paths = _write_parties(dataset, Path(out_dir), prefix, parties, label_set, labels is not None)
    summary = {
        "dataset": dataset.name,
        "kind": dataset.kind,
        "task": dataset.task,
        "num_samples": len(dataset),
        "num_blocks": num_blocks,
        "layout": layout,
        "prefix": prefix,
        "p_miss_train": [float(p) for p in p_miss_train],
        "p_miss_test": [float(p) for p in p_miss_test],
        "missing": {name: m.spec for name, m in chosen.items()},
        "labels": labels,
        "test_fraction": test_fraction,
        "seed": seed,
        "standardize": standardize,
        "label_blocks": sorted(label_set),
        "keep_labels": keep_labels,
        "aligned_labels": aligned_labels,
        "parties": [p.name for p in paths],
        "counts": counts,
    }
    (Path(out_dir) / PREPARE_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    log.info("prepared %d parties of %s in %s", num_blocks, dataset.name, out_dir)
    return paths


def _check_prepare_args(
    num_blocks: int,
    p_miss_train: Sequence[float],
    p_miss_test: Sequence[float],
    test_fraction: float,
    label_blocks: list[int] | None,
) -> set[int]:
    """Validate the arguments; return the set of blocks that hold labels."""
    if num_blocks < 1:
        raise ConfigError(f"number of parties must be at least 1, got {num_blocks}")
    for name, probabilities in (("train", p_miss_train), ("test", p_miss_test)):
        if len(probabilities) != num_blocks:
            raise ConfigError(
                f"{len(probabilities)} {name} missing probabilities for {num_blocks} parties"
            )
        _check_probabilities(probabilities)
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigError(f"test fraction must be in [0, 1), got {test_fraction}")
    if label_blocks is None:
        return set(range(num_blocks))
    if not label_blocks:
        raise ConfigError("at least one party must hold labels")
    for block in label_blocks:
        if not 0 <= block < num_blocks:
            raise ConfigError(f"label block {block} out of range (0..{num_blocks - 1})")
    return set(label_blocks)


def _train_test_indices(dataset: Dataset, test_fraction: float, seed: int) -> dict[str, np.ndarray]:
    """Row indices of each split (sorted), from one seeded permutation of the samples."""
    if len(np.unique(dataset.ids)) != len(dataset.ids):
        raise DataError(f"{dataset.name}: sample IDs are not unique")
    order = seeded_rng(seed, "split").permutation(len(dataset))
    n_test = round(len(dataset) * test_fraction)
    splits = {"train": np.sort(order[n_test:])}
    if n_test > 0:
        splits["test"] = np.sort(order[:n_test])
    return splits


@dataclass(frozen=True)
class _Cut:
    """What cutting a data set into parties needs."""

    dataset: Dataset
    x: np.ndarray  # the features parties will hold (standardised if asked)
    rows: dict[str, np.ndarray]  # split -> row indices
    mechanisms: dict[str, Mechanism]  # split -> its missingness
    num_blocks: int
    seed: int
    layout: Layout
    label_set: set[int]
    labels: int | None  # keep this many training labels (None: all)
    keep_labels: bool = False  # label parties keep label-only rows
    aligned_labels: int = 0  # labelled training samples made fully aligned (the paper's reserve)


def _cut_parties(cut: _Cut) -> tuple[list[dict[str, PartySplit]], dict[str, dict[str, Any]]]:
    """Each party's splits (block k of the rows it observes, then with `keep_labels` a label
    party's label-only rows) and the counts for prepare.json."""
    num_blocks = cut.num_blocks
    parties: list[dict[str, PartySplit]] = [{} for _ in range(num_blocks)]
    counts: dict[str, dict[str, Any]] = {}
    split_blocks_of = {
        name: split_blocks(cut.x[r], cut.dataset.kind, num_blocks, cut.layout)
        for name, r in cut.rows.items()
    }
    # MNAR/MAR read a block's mean feature relative to its training average (no test leakage).
    centres = block_means(split_blocks_of["train"]).mean(axis=0)  # (K,)
    # The paper's MAR rules read a piece's variance on the normalised scale (vfl_core.data.
    # missingness): the training features' pooled variance.
    train_blocks = split_blocks_of["train"]
    flat = np.concatenate([b.reshape(len(b), -1) for b in train_blocks], axis=1)
    scale = float(flat.var(dtype=np.float64)) or 1.0
    for name, split_rows in cut.rows.items():
        blocks = split_blocks_of[name]
        rng = seeded_rng(cut.seed, f"miss_{name}")
        observed = draw_observed(cut.mechanisms[name], blocks, centres, rng, scale)  # (n, K)
        y = cut.dataset.y[split_rows]
        if name == "train" and cut.labels is not None:
            y = _few_labels(y, observed, cut)
            observed = _aligned_reserve(observed, y, cut)
        label_only = (observed.any(axis=1)[:, None] & ~observed) if cut.keep_labels else None
        for k in range(num_blocks):
            keep = observed[:, k]  # rows nobody observes end up in no party
            labels = y[keep] if k in cut.label_set else None
            ids = cut.dataset.ids[split_rows[keep]]
            if labels is not None and label_only is not None:  # then its label-only rows
                only = label_only[:, k]
                ids = np.concatenate([ids, cut.dataset.ids[split_rows[only]]])
                labels = np.concatenate([labels, y[only]])
            parties[k][name] = PartySplit(ids, blocks[k][keep], labels)
        counts[name] = _split_counts(observed)
        if name == "train" and cut.labels is not None:
            counts[name]["labelled"] = int((y != UNLABELLED).sum())
        if label_only is not None:
            counts[name]["label_only_per_party"] = [
                int(label_only[:, k].sum()) if k in cut.label_set else 0 for k in range(num_blocks)
            ]
    return parties, counts


def _few_labels(y: np.ndarray, observed: np.ndarray, cut: _Cut) -> np.ndarray:
    """The training labels with all but ``cut.labels`` of the samples a label party holds
    set to UNLABELLED."""
    held = observed[:, sorted(cut.label_set)].any(axis=1)
    if cut.keep_labels:  # a label party holds the labels of every sample some party holds
        held = observed.any(axis=1)
    assert cut.labels is not None
    keep = choose_labelled(held, cut.labels, seeded_rng(cut.seed, "labels"))
    return np.where(keep, y, UNLABELLED)


def _aligned_reserve(observed: np.ndarray, y: np.ndarray, cut: _Cut) -> np.ndarray:
    """The mask with ``cut.aligned_labels`` of the labelled samples (drawn uniformly) observed by
    every party; the other samples keep the mechanism's mask."""
    if not cut.aligned_labels:
        return observed
    labelled = np.flatnonzero(y != UNLABELLED)
    chosen = seeded_rng(cut.seed, "aligned_labels").choice(
        labelled, size=cut.aligned_labels, replace=False
    )
    out = observed.copy()
    out[chosen] = True
    return out


def _standardized(x: np.ndarray, train_rows: np.ndarray) -> np.ndarray:
    """Per-feature standardisation with train statistics; constant features keep scale 1."""
    mean = x[train_rows].mean(axis=0, dtype=np.float64)
    std = x[train_rows].std(axis=0, dtype=np.float64)
    std[std == 0] = 1.0  # a constant feature would divide by zero
    return ((x - mean) / std).astype(np.float32)


def _split_counts(observed: np.ndarray) -> dict[str, Any]:
    held = observed.any(axis=1)
    return {
        "rows": int(held.sum()),
        "dropped_no_party": int((~held).sum()),
        "per_party": [int(c) for c in observed.sum(axis=0)],
    }


def _write_parties(
    dataset: Dataset,
    out_dir: Path,
    prefix: str,
    parties: list[dict[str, PartySplit]],
    label_set: set[int],
    few_labels: bool,
) -> list[Path]:
    paths = []
    for k, splits in enumerate(parties):
        meta = PartyMeta(
            dataset=dataset.name,
            block=k,
            num_blocks=len(parties),
            kind=dataset.kind,
            feature_shape=splits["train"].features.shape[1:],
            num_classes=dataset.num_classes,
            has_labels=k in label_set,
            task=dataset.task,
            unlabelled_rows=few_labels and k in label_set,
        )
        path = Path(out_dir) / f"{prefix}{k}"
        save_party_dir(path, PartyData(meta=meta, splits=splits))
        paths.append(path)
    return paths
