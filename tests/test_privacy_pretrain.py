"""A feature-only party's tower trained without labels before the federation (issue 44,
vfl_core.privacy.pretrain): the corruption, the loss, the training, and the setting's checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from vfl_core.model.tower import MLPRepresentation, build_seeded
from vfl_core.privacy.config import PrivacyConfig
from vfl_core.privacy.pretrain import (
    Pretrain,
    contrast_loss,
    corrupt,
    denoise_loss,
    pretrain_tower,
)


def _rows(n: int = 600, seed: int = 0) -> np.ndarray:
    """Eight numeric columns driven by two latent factors, then a categorical code (0..2)."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, 2))
    dense = z @ rng.standard_normal((2, 8)) + 0.1 * rng.standard_normal((n, 8))
    code = rng.integers(0, 3, size=(n, 1))
    return np.hstack([dense, code]).astype(np.float32)


def _tower(seed: int = 1) -> torch.nn.Module:
    return build_seeded(seed, lambda: MLPRepresentation(9, (32,), 16, final_activation=False))


def test_given_a_batch_when_corrupted_then_swapped_entries_come_from_their_own_column():
    x = torch.arange(2000, dtype=torch.float32).reshape(200, 10)  # every entry unique
    noisy, mask = corrupt(x, 0.3, torch.Generator().manual_seed(0))
    assert mask.mean().item() == pytest.approx(0.3, abs=0.03)
    kept = mask == 0
    assert torch.equal(noisy[kept], x[kept])  # the entries not drawn are untouched
    for col in range(10):  # each drawn entry is a value of the same column (some other row's)
        assert set(noisy[:, col].tolist()) <= set(x[:, col].tolist())


def test_given_a_perfect_decoding_when_scored_then_the_loss_is_below_a_wrong_one():
    clean = torch.randn(64, 5)
    mask = (torch.rand(64, 5) < 0.3).float()
    right = torch.cat([clean[:, :3], (mask * 2 - 1) * 20], dim=1)  # dense 3, logits for 5
    wrong = torch.cat([-clean[:, :3], (1 - 2 * mask) * 20], dim=1)
    assert denoise_loss(right, clean, mask, 3).item() < 1e-6
    assert denoise_loss(wrong, clean, mask, 3).item() > 1.0


def test_given_rows_when_pretrained_then_the_loss_falls_and_the_run_is_reproducible():
    rows = _rows()
    plan = Pretrain(epochs=15, corruption=0.3)
    a, b = _tower(), _tower()
    drawn = [p.detach().clone() for p in a.parameters()]
    losses = pretrain_tower(a, rows, 8, plan, seed=3, block=1, device=torch.device("cpu"))
    again = pretrain_tower(b, rows, 8, plan, seed=3, block=1, device=torch.device("cpu"))
    assert len(losses) == 15 and losses[-1] < 0.7 * losses[0]
    assert losses == again  # one seed fixes every draw
    for p, q, d in zip(a.parameters(), b.parameters(), drawn, strict=True):
        assert torch.equal(p, q)
        assert not torch.equal(p, d)  # it trained


def test_given_pretraining_when_probed_then_its_embedding_recovers_the_rows_factors():
    # What the label party's head gets: a linear read-out of the latent factors from the
    # embedding fits better after pretraining than from the tower as drawn.
    rows = _rows(n=800, seed=2)
    rng = np.random.default_rng(2)
    z = rng.standard_normal((800, 2))  # the same draws as _rows(seed=2) made first
    tower = _tower(seed=4)

    def probe_error() -> float:
        with torch.no_grad():
            e = tower(torch.from_numpy(rows)).numpy().astype(np.float64)
        e = np.hstack([e, np.ones((len(e), 1))])
        coef, *_ = np.linalg.lstsq(e[:400], z[:400], rcond=None)
        return float(np.mean((e[400:] @ coef - z[400:]) ** 2))

    # The tower as drawn has 16 random features of 9 columns: little is lost, so the check is
    # only that pretraining keeps the factors readable (a denoising code must not drop them).
    before = probe_error()
    pretrain_tower(tower, rows, 8, Pretrain(20, 0.3), seed=0, block=1, device=torch.device("cpu"))
    assert probe_error() < max(0.05, 2 * before)


def test_given_pretraining_without_withhold_when_the_config_loads_then_it_is_refused():
    with pytest.raises(ValidationError, match="feature_pretrain needs gradient_defence withhold"):
        PrivacyConfig(feature_pretrain="denoise")
    assert PrivacyConfig(gradient_defence="withhold", feature_pretrain="denoise").active


def test_given_matched_views_when_contrasted_then_the_loss_is_below_shuffled_ones():
    anchor = torch.randn(64, 8)
    matched = contrast_loss(anchor, anchor + 0.01 * torch.randn(64, 8))
    shuffled = contrast_loss(
        anchor, anchor[torch.randperm(64, generator=torch.Generator().manual_seed(0))]
    )
    assert matched.item() < shuffled.item() - 0.5


@pytest.mark.parametrize("objective", ["contrast", "both"])
def test_given_the_contrastive_objective_when_pretrained_then_it_trains_reproducibly(objective):
    rows = _rows()
    plan = Pretrain(epochs=10, corruption=0.6, objective=objective)
    a, b = _tower(), _tower()
    drawn = [p.detach().clone() for p in a.parameters()]
    losses = pretrain_tower(a, rows, 8, plan, seed=3, block=1, device=torch.device("cpu"))
    again = pretrain_tower(b, rows, 8, plan, seed=3, block=1, device=torch.device("cpu"))
    assert len(losses) == 10 and losses[-1] < losses[0]
    assert losses == again
    for p, q, d in zip(a.parameters(), b.parameters(), drawn, strict=True):
        assert torch.equal(p, q)
        assert not torch.equal(p, d)
