"""A stratified validation split (TrainConfig.validation_split "stratified").

The coordinator chooses the validation samples but never sees a label. Each label party
therefore draws, for every training row, a number in [0, 1) such that within each class the
draws fall one in each of n_c equal intervals (a random permutation of the intervals, a uniform
point inside each: stratified sampling of [0, 1)). The coordinator holds out the candidate
samples with the smallest draws, so each class is held out in its share of the candidates
(to within one sample a class where every label-party row is a candidate). A row's draw alone is
uniform on [0, 1) whatever its class; what the draws of a class jointly show (one per interval)
is far less than the class weights of balanced resampling, which name each row's class.
"""

from __future__ import annotations

import numpy as np

from vfl_core.seeding import Stream, rng


def draws(labels: np.ndarray, seed: int, block: int) -> np.ndarray:
    """(rows,) float32 draws of a label party's training rows, from the seed and its block
    (an unlabelled row is a class of its own)."""
    generator = rng(seed, Stream.VALIDATION, block)
    out = np.empty(len(labels), dtype=np.float64)
    for value in np.unique(labels):
        index = np.flatnonzero(labels == value)
        out[index] = (generator.permutation(len(index)) + generator.random(len(index))) / len(index)
    return out.astype(np.float32)


def hold_out_stratified(
    scorable: np.ndarray, draw: np.ndarray, fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """(training, validation) key indices, ascending, as early_stop.hold_out but taking the
    round(fraction x candidates) candidates with the smallest `draw` (N,) (ties: the lower
    key); `draw` is NaN only where `scorable` is False."""
    candidates = np.flatnonzero(scorable)
    size = round(fraction * len(candidates))
    order = np.argsort(draw[candidates], kind="stable")
    held = np.zeros(len(scorable), dtype=bool)
    held[candidates[order[:size]]] = True
    return np.flatnonzero(~held), np.flatnonzero(held)
