"""The defences of a PrivacyConfig as one party applies them, each with its own random stream
(seeded from the run's seed and the party's block, so both transports draw the same noise)."""

from __future__ import annotations

import numpy as np
import torch

from vfl_core.privacy.config import PrivacyConfig
from vfl_core.privacy.defences import (
    clip_and_noise,
    direction_noise,
    epsilon,
    max_norm,
    randomized_response,
    row_noise,
)
from vfl_core.privacy.label_prior import two_stage_labels
from vfl_core.seeding import Stream, derive_seed, rng

# max_norm_direction_per_row: each row's max-norm noise at least this times the batch's largest
# gradient norm (issue 44; benchmarks/results/privacy.md).
ROW_NOISE_FLOOR = 1.0


class PartyGuard:
    """One party's defences: its outgoing gradients (label party), its outgoing training
    embeddings (every party) and its training labels (label party, once)."""

    def __init__(self, config: PrivacyConfig, seed: int, block: int) -> None:
        self.config = config
        self._grad_gen = _generator(seed, Stream.PRIVACY_GRADIENT, block)
        self._emb_gen = _generator(seed, Stream.PRIVACY_EMBEDDING, block)
        self._label_rng = rng(seed, Stream.PRIVACY_LABELS, block)
        self._seed, self._block = seed, block
        self._score_labels: dict[str, np.ndarray] = {}  # split -> the labels Score uses
        self.releases = 0  # training embedding batches sent, for the accountant

    def gradient(
        self,
        grad: torch.Tensor,
        labels: torch.Tensor | None,
        rows: np.ndarray | None = None,
        target: int = 0,
    ) -> torch.Tensor:
        """The gradient for another party's embedding, as it may leave this party (`labels`:
        the batch's, needed by the direction defences; `rows`: its train rows and `target`
        the block whose embedding it is, needed by the per-row defence)."""
        kind = self.config.gradient_defence
        if kind == "withhold":
            return torch.zeros_like(grad)
        if kind == "max_norm_direction_per_row":
            if rows is None or labels is None:
                raise ValueError("max_norm_direction_per_row needs the batch's rows and labels")
            draws = row_noise(
                derive_seed(self._seed, Stream.PRIVACY_ROWS, self._block, target),
                rows,
                grad.shape[1],
            ).to(grad.device)
            # Every row's own noise at least the batch's largest norm: a row's direction is then
            # its draw's as much as its gradient's in every epoch, whatever its class, so the
            # sum over epochs is as steady for one class as for the other (with the top-up
            # alone, the small gradients' rows were steadier: summed norms ranked them).
            grad = max_norm(grad, noise=draws[:, :-1], floor=ROW_NOISE_FLOOR)
            return direction_noise(grad, labels, self.config.direction_power, z=draws[:, -1:])
        if kind in ("max_norm", "max_norm_direction"):
            grad = max_norm(grad, self._grad_gen)
        if kind in ("direction", "max_norm_direction") and labels is not None:
            grad = direction_noise(grad, labels, self.config.direction_power, self._grad_gen)
        return grad

    def embedding(self, embedding: torch.Tensor) -> torch.Tensor:
        """A training embedding batch, as it may leave this party (counted for epsilon)."""
        clip = self.config.embedding_clip
        if clip is None:
            return embedding
        self.releases += 1
        return clip_and_noise(embedding, clip, self.config.embedding_noise, self._emb_gen)

    def labels(
        self, labels: np.ndarray, num_classes: int, features: np.ndarray | None = None
    ) -> np.ndarray:
        """The training labels this party trains with (randomised response, with the prior
        the config names, or as they are); `features`: its own, for the own_features prior."""
        eps, prior = self.config.label_epsilon, self.config.label_prior
        if eps is None:
            return labels
        if prior == "uniform":
            return randomized_response(labels, eps, num_classes, self._label_rng)
        own = features if prior == "own_features" else None
        return two_stage_labels(labels, own, num_classes, eps, prior, self._label_rng)

    def score_labels(self, split: str, labels: np.ndarray, num_classes: int) -> np.ndarray:
        """The labels this party scores `split` with: one randomised-response copy drawn the
        first time (so asking again averages nothing out), or the labels as they are."""
        eps = self.config.score_epsilon
        if eps is None:
            return labels
        kept = self._score_labels.get(split)
        if kept is None or len(kept) != len(labels):
            index = SPLIT_STREAMS.get(split, len(SPLIT_STREAMS))
            gen = rng(self._seed, Stream.PRIVACY_SCORES, self._block, index)
            kept = self._score_labels[split] = randomized_response(labels, eps, num_classes, gen)
        return kept

    def epsilon(self, sample_rate: float) -> float | None:
        """The embeddings' (epsilon, delta) so far; None when they are not noised."""
        if self.config.embedding_clip is None:
            return None
        return epsilon(self.config.embedding_noise, sample_rate, self.releases, self.config.delta)

    def record(self, sample_rate: float) -> dict[str, object]:
        """What this party applied, for the run record."""
        out: dict[str, object] = self.config.model_dump()
        eps = self.epsilon(sample_rate)
        if eps is not None:
            out["embedding_epsilon"] = eps
            out["embedding_releases"] = self.releases
        return out


SPLIT_STREAMS = {"train": 0, "test": 1}  # the draw of each split's scoring labels


def _generator(seed: int, stream: Stream, block: int) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(seed, stream, block))
