"""Missingness mechanisms for whole feature blocks, and "few labels".

A mechanism decides, per sample, which parties hold it (the observed mask, shape (n, K)).
The names follow the DLVM-VFL paper (Hong, Park, Hwang, arXiv 2505.11035):

- ``mcar:P``  missing completely at random: party k misses each sample with P (or with its
  own probability, as `vfl prepare --p-miss-per-party/--nonuniform` give). Today's behaviour,
  drawn exactly as before (same seed, same mask).
- ``mnar:P``  missing not at random ("MNAR 7" is ``mnar:0.7``): party k misses a sample with
  probability P if the *block's own* mean feature is negative, else with 1 - P. The mask then
  depends on the values that go missing.
- ``mar1``  the DLVM paper's MAR 1 (its App. D.4, Algorithm 2): the pieces (blocks) are visited
  in a random order per sample; each visited piece is observed; the visit stops at the first
  piece whose variance exceeds the threshold T (1.1 at the start, lowered by 0.15 after each
  piece that does not).
- ``mar2[:B]`` the paper's MAR 2 (Algorithm 3): the same random visit from T = 0.5; a piece of
  variance v > T spends v - T of the budget B (0.7, the paper's; 0.5 its ModelNet10 value); the
  visit stops once B <= 0, else T drops by 0.15.
- ``mar1-anchor[:P]`` (this project's earlier MAR 1, not the paper's): block 0 is always
  observed; every other block is dropped with P if block 0's mean feature is negative, else
  with 1 - P (P defaults to 0.7).
- ``mar2-anchor[:P]`` (this project's earlier MAR 2, not the paper's): block 0 is always
  observed; block k is dropped with P if the mean of the *observed* blocks j < k's mean
  features is negative, else 1 - P.

A piece's variance is the variance of its features in the sample, on the paper's normalised
scale: divided by ``scale``, the variance of every training feature pooled (`vfl prepare`
standardises tabular columns, so there it is about 1; MNIST's pixels in [0, 1] pool to about
0.095).

"Mean feature negative" is measured after centring: a block's per-sample mean feature minus
its average over the training split (``centres``). Standardised tabular data (what `vfl
prepare` writes) has centres of zero, so this is the paper's "negative mean" exactly; for
images (pixels in [0, 1], never negative) it is "darker than the average block".

The uniform draws are made before any value is looked at, so two data sets that agree on
the blocks a rule may read get the same mask from the same random stream (the MAR tests rely
on it). Samples no party observes stay in the mask as all-False rows; the caller drops them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from vfl_core.errors import ConfigError

log = logging.getLogger(__name__)

Kind = Literal["mcar", "mnar", "mar1", "mar2", "mar1-anchor", "mar2-anchor"]
KINDS: tuple[str, ...] = get_args(Kind)
# mcar and mnar need their P; mar2's is its budget B; mar1 has none (its P is unused)
DEFAULT_P: dict[str, float] = {"mar1": 0.0, "mar2": 0.7, "mar1-anchor": 0.7, "mar2-anchor": 0.7}
UNLABELLED = -1  # a classification label that is not known (few-labels runs)
ANCHOR = 0  # the block the anchor MAR rules condition on (always observed)
MAR1_THRESHOLD, MAR2_THRESHOLD, MAR_DECREMENT = 1.1, 0.5, 0.15  # the paper's T and Delta


@dataclass(frozen=True)
class Mechanism:
    """One missingness mechanism. For mcar, ``per_party`` (one probability per block) may
    replace the single ``p``."""

    kind: Kind
    p: float
    per_party: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        for p in (self.p, *(self.per_party or ())):
            if not 0.0 <= p <= 1.0:
                raise ConfigError(f"missing probability must be in [0, 1], got {p}")
        if self.per_party is not None and self.kind != "mcar":
            raise ConfigError(f"per-party probabilities apply to mcar, not {self.kind}")

    @property
    def spec(self) -> str:
        """The mechanism as the CLI writes it: ``mnar:0.7``."""
        if self.per_party is not None:
            return "mcar:" + "/".join(f"{p:g}" for p in self.per_party)
        return self.kind if self.kind == "mar1" else f"{self.kind}:{self.p:g}"

    def probabilities(self, num_blocks: int) -> list[float]:
        """MCAR's per-block probabilities."""
        if self.per_party is None:
            return [self.p] * num_blocks
        if len(self.per_party) != num_blocks:
            raise ConfigError(f"{len(self.per_party)} per-party probabilities for {num_blocks}")
        return list(self.per_party)


def mcar(p_miss: Sequence[float]) -> Mechanism:
    """Today's per-party MCAR as a mechanism (one probability, or one per block)."""
    values = tuple(float(p) for p in p_miss)
    if values and all(p == values[0] for p in values):
        return Mechanism("mcar", values[0])
    return Mechanism("mcar", max(values, default=0.0), per_party=values)


def parse_mechanism(text: str) -> Mechanism:
    """``kind[:P]``, e.g. ``mcar:0.2``, ``mnar:0.9``, ``mar1``; a clear error otherwise."""
    kind, _, value = text.strip().lower().partition(":")
    if kind not in KINDS:
        raise ConfigError(
            f"unknown missingness mechanism {text!r} (use {', '.join(KINDS)}, e.g. mnar:0.7)"
        )
    if not value:
        if kind not in DEFAULT_P:
            raise ConfigError(f"mechanism {kind} needs a probability, e.g. {kind}:0.5")
        return Mechanism(kind, DEFAULT_P[kind])  # type: ignore[arg-type]
    if kind == "mar1":
        raise ConfigError("mechanism mar1 takes no parameter (the paper's T = 1.1, delta = 0.15)")
    try:
        p = float(value)
    except ValueError:
        raise ConfigError(f"mechanism {text!r}: {value!r} is not a probability") from None
    return Mechanism(kind, p)  # type: ignore[arg-type]


# ---------------------------------------------------------------- drawing masks


def block_means(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """Each sample's mean feature per block: (n, K)."""
    return np.stack([b.reshape(len(b), -1).mean(axis=1, dtype=np.float64) for b in blocks], 1)


def draw_observed(
    mechanism: Mechanism,
    blocks: Sequence[np.ndarray],
    centres: np.ndarray,
    rng: np.random.Generator,
    scale: float = 1.0,
) -> np.ndarray:
    """The observed mask (n, K) of samples whose feature blocks are ``blocks`` (block k:
    (n, ...)); ``centres`` (K,) are the training split's average block means, ``scale`` its
    pooled feature variance (the paper's MAR rules read variances on that scale)."""
    num_blocks, n = len(blocks), len(blocks[0])
    if mechanism.kind == "mcar":
        return draw_mcar(n, mechanism.probabilities(num_blocks), rng)
    if mechanism.kind in ("mar1-anchor", "mar2-anchor") and num_blocks < 2:
        raise ConfigError(f"{mechanism.kind} needs at least 2 parties (block 0 is the anchor)")
    uniform = rng.random((n, num_blocks))  # drawn before any value is read (see docstring)
    if mechanism.kind in ("mar1", "mar2"):
        variance = block_variances(blocks) / scale  # (n, K)
        budget = None if mechanism.kind == "mar1" else mechanism.p
        observed = visit_pieces(uniform, variance, budget)
    else:
        negative = block_means(blocks) - np.asarray(centres, dtype=np.float64) < 0  # (n, K)
        observed = _anchor_rules(mechanism, uniform, negative, block_means(blocks) - centres)
    log.debug("%s: %d of %d rows observed by no party", mechanism.spec, (~observed.any(1)).sum(), n)
    return observed


def block_variances(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """Each sample's variance of its features per block: (n, K)."""
    return np.stack([b.reshape(len(b), -1).var(axis=1, dtype=np.float64) for b in blocks], 1)


def visit_pieces(uniform: np.ndarray, variance: np.ndarray, budget: float | None) -> np.ndarray:
    """The paper's Algorithms 2 (``budget`` None) and 3, for every sample at once.

    ``uniform`` (n, K) orders each sample's visit (the piece of smallest draw first: a uniformly
    random order); every visited piece is observed. Algorithm 2 stops after the first piece of
    variance v > T; Algorithm 3 spends v - T of the budget on such a piece and stops once the
    budget is <= 0. T starts at 1.1 (Algorithm 2) or 0.5 (3) and drops by 0.15 per piece."""
    n, num_blocks = variance.shape
    order = np.argsort(uniform, axis=1, kind="stable")  # (n, K) visiting order
    rows = np.arange(n)
    observed = np.zeros((n, num_blocks), dtype=bool)
    visiting = np.ones(n, dtype=bool)
    threshold = np.full(n, MAR1_THRESHOLD if budget is None else MAR2_THRESHOLD)
    left = np.full(n, 0.0 if budget is None else budget)
    for step in range(num_blocks):
        piece = order[:, step]
        observed[rows[visiting], piece[visiting]] = True
        v = variance[rows, piece]
        if budget is None:
            stop = v > threshold
        else:
            left = np.where(v > threshold, left - (v - threshold), left)
            stop = left <= 0
        visiting &= ~stop
        threshold = threshold - MAR_DECREMENT
    return observed


def _anchor_rules(
    mechanism: Mechanism, uniform: np.ndarray, negative: np.ndarray, centred: np.ndarray
) -> np.ndarray:
    """MNAR, and this project's anchor MAR rules (not the paper's)."""
    p = mechanism.p
    if mechanism.kind == "mnar":
        return uniform >= np.where(negative, p, 1.0 - p)
    if mechanism.kind == "mar1-anchor":
        drop_p = np.where(negative[:, ANCHOR], p, 1.0 - p)  # (n,)
        observed = uniform >= drop_p[:, None]
        observed[:, ANCHOR] = True
        return observed
    return _mar2(uniform, centred, p)


def _mar2(uniform: np.ndarray, centred: np.ndarray, p: float) -> np.ndarray:
    """Sequential anchor MAR: block k's drop probability reads only the blocks j < k observed."""
    n, num_blocks = uniform.shape
    observed = np.zeros((n, num_blocks), dtype=bool)
    observed[:, ANCHOR] = True
    total = np.zeros(n)  # sum of the observed earlier blocks' centred means
    count = np.zeros(n)
    for k in range(num_blocks):
        if k != ANCHOR:
            negative = total / count < 0  # count >= 1: the anchor is always observed
            observed[:, k] = uniform[:, k] >= np.where(negative, p, 1.0 - p)
        total += np.where(observed[:, k], centred[:, k], 0.0)
        count += observed[:, k]
    return observed


def draw_mcar(n: int, p_miss: Sequence[float], rng: np.random.Generator) -> np.ndarray:
    """Party k independently misses each sample with p_miss[k]: (n, K)."""
    for p in p_miss:
        if not 0.0 <= p <= 1.0:
            raise ConfigError(f"missing probability must be in [0, 1], got {p}")
    return rng.random((n, len(p_miss))) >= np.asarray(p_miss)  # (n, K)


# ---------------------------------------------------------------- few labels


def choose_labelled(candidates: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """A boolean mask over ``candidates`` (a boolean mask of samples a label party holds) that
    keeps ``count`` of them labelled, drawn uniformly."""
    available = np.flatnonzero(candidates)
    if count < 0:
        raise ConfigError(f"number of labels must be 0 or more, got {count}")
    if count > len(available):
        raise ConfigError(
            f"{count} labels asked, but label parties hold only {len(available)} training samples"
        )
    keep = np.zeros(len(candidates), dtype=bool)
    keep[rng.choice(available, size=count, replace=False)] = True
    return keep
