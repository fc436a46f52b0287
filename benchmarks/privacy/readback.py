"""Can the label party read a feature-only party's raw block back from its embeddings?

Under `--privacy-feature-tower orthogonal` a feature-only party sends E = Z W^T, Z its prepared
block (rows x F) with each column standardised by its own training rows' statistics, W fixed
(embed_dim x F, orthonormal columns: vfl_core.privacy.private_tower). The label party (and the
coordinator, which relays E) holds E. Three reads of Z (the block in standardised units; the
columns' means and scales are a further F pairs of numbers):

- `federation map`: the label party rebuilds W from the federation's seed, which it knows, and
  reads Z = E W (exact when the party drew W from that seed: no private seed);
- `no map`: it knows nothing of W; without a known row it has no linear read of Z from E, so
  the reference is Z's own mean (relative error 1);
- `known rows`: it knows the raw block of `known` rows (e.g. customers it shares), fits the map
  from E back to the raw columns by least squares (with an intercept) on them and reads every
  other row: an affine map of F columns is recovered from F + 1 rows.

Each is the relative error ||read - Z|| / ||Z - mean(Z)|| on the party's training rows
(0: read back exactly; about 1 or more: nothing read).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vfl_core.privacy.private_tower import orthogonal_map

READS = ("federation map", "no map", "known rows")


def relative_error(read: np.ndarray, truth: np.ndarray) -> float:
    spread = np.linalg.norm(truth - truth.mean(axis=0))
    return float(np.linalg.norm(read - truth) / spread) if spread > 0 else 0.0


def readback(
    embedded: np.ndarray, raw: np.ndarray, federation_seed: int, block: int, known: np.ndarray
) -> dict[str, float]:
    """The three reads of `raw` (rows x F) from `embedded` (rows x embed_dim); `known`: a mask
    of the rows whose raw features the label party knows."""
    flat = raw.reshape(len(raw), -1).astype(np.float64)
    scale = flat.std(axis=0)
    z = (flat - flat.mean(axis=0)) / np.where(scale > 0, scale, 1.0)
    e = embedded.astype(np.float64)
    w = orthogonal_map(flat.shape[1], e.shape[1], federation_seed, block).numpy().astype(np.float64)
    design = np.hstack([e, np.ones((len(e), 1))])
    back, *_ = np.linalg.lstsq(design[known], z[known], rcond=None)  # [E, 1] B = Z, known rows
    rest = ~known
    return {
        "federation map": relative_error(e @ w, z),
        "no map": relative_error(np.zeros_like(z), z),
        "known rows": relative_error(design[rest] @ back, z[rest]),
    }


def readback_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The page's section: per table, K and setting, the worst (smallest) relative error of each
    read over the seeds and the feature-only parties."""
    measured = [r for r in runs if r.get("readback")]
    if not measured:
        return []
    lines = [
        "",
        "## Reading the raw block back (orthogonal towers)",
        "",
        "The label party's read of each feature-only party's prepared block from the embeddings "
        "it receives (`benchmarks/privacy/readback.py`): with the map rebuilt from the "
        "federation's seed, with no map, and fitted on the 40 rows whose raw features it is "
        "given. Relative error ||read - Z|| / ||Z - mean|| (Z: the block, each column standardised "
        "by the party's training rows), the smallest over the seeds and the parties: 0 is the "
        "block read back exactly, 1 no better than its mean.",
        "",
        "| table | K | defence | seeds | " + " | ".join(READS) + " |",
        "| --- | ---: | --- | --- |" + " ---: |" * len(READS),
    ]
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for run in measured:
        groups.setdefault((run["table"], run["parties"], run["defence"]), []).append(run)
    for (table, k, defence), group in sorted(groups.items()):
        seeds = ",".join(str(r["seed"]) for r in sorted(group, key=lambda r: r["seed"]))
        cells = [min(p[read] for r in group for p in r["readback"].values()) for read in READS]
        lines.append(
            f"| {table} | {k} | {defence} | {seeds} | "
            + " | ".join(f"{c:.3f}" for c in cells)
            + " |"
        )
    return lines
