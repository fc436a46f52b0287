"""Missingness mechanisms for whole feature blocks, and "few labels".

A mechanism decides, per sample, which parties hold it (the observed mask, shape (n, K)).
The names follow the DLVM-VFL paper (Hong, Park, Hwang, arXiv 2505.11035):

- ``mcar:P``  missing completely at random: party k misses each sample with P (or with its
  own probability, as `vfl prepare --p-miss-per-party/--nonuniform` give). Today's behaviour,
  drawn exactly as before (same seed, same mask).
- ``mnar:P``  missing not at random ("MNAR 7" is ``mnar:0.7``): party k misses a sample with
  probability P if the *block's own* mean feature is negative, else with 1 - P. The mask then
  depends on the values that go missing.
- ``mar1[:P]`` missing at random, one anchor: block 0 is always observed; every other block
  is dropped with P if block 0's mean feature is negative, else with 1 - P (P defaults to 0.7).
- ``mar2[:P]`` missing at random, sequential: block 0 is always observed; block k is dropped
  with P if the mean of the *observed* blocks j < k's mean features is negative, else 1 - P.

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

Kind = Literal["mcar", "mnar", "mar1", "mar2"]
KINDS: tuple[str, ...] = get_args(Kind)
DEFAULT_P: dict[str, float] = {"mar1": 0.7, "mar2": 0.7}  # mcar and mnar need their P
UNLABELLED = -1  # a classification label that is not known (few-labels runs)
ANCHOR = 0  # the block a MAR rule conditions on (always observed)


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
        return f"{self.kind}:{self.p:g}"

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
) -> np.ndarray:
    """The observed mask (n, K) of samples whose feature blocks are ``blocks`` (block k:
    (n, ...)); ``centres`` (K,) are the training split's average block means."""
    num_blocks, n = len(blocks), len(blocks[0])
    if mechanism.kind == "mcar":
        return draw_mcar(n, mechanism.probabilities(num_blocks), rng)
    if mechanism.kind in ("mar1", "mar2") and num_blocks < 2:
        raise ConfigError(f"{mechanism.kind} needs at least 2 parties (block 0 is the anchor)")
    uniform = rng.random((n, num_blocks))  # drawn before any value is read (see docstring)
    negative = block_means(blocks) - np.asarray(centres, dtype=np.float64) < 0  # (n, K)
    p = mechanism.p
    if mechanism.kind == "mnar":
        observed = uniform >= np.where(negative, p, 1.0 - p)
    elif mechanism.kind == "mar1":
        drop_p = np.where(negative[:, ANCHOR], p, 1.0 - p)  # (n,)
        observed = uniform >= drop_p[:, None]
        observed[:, ANCHOR] = True
    else:
        observed = _mar2(uniform, block_means(blocks) - centres, p)
    log.debug("%s: %d of %d rows observed by no party", mechanism.spec, (~observed.any(1)).sum(), n)
    return observed


def _mar2(uniform: np.ndarray, centred: np.ndarray, p: float) -> np.ndarray:
    """Sequential MAR: block k's drop probability reads only the blocks j < k observed."""
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
