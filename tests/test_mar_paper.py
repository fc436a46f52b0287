"""The DLVM paper's MAR 1 and MAR 2 (FALSE-VFL, App. D.4, Algorithms 2 and 3) against the
algorithms as printed: hand-computed visits, a literal one-sample transcription, the random
visiting order, the thresholds and the budget, and the frequencies on a fixed seed."""

from __future__ import annotations

import numpy as np
import pytest

from vfl_core.data.missingness import (
    block_variances,
    draw_observed,
    parse_mechanism,
    visit_pieces,
)
from vfl_core.errors import ConfigError

K = 8


def literal(order: list[int], variance: list[float], budget: float | None) -> list[int]:
    """Algorithms 2 (budget None) and 3 line by line, for one sample: the pieces observed."""
    threshold = 1.1 if budget is None else 0.5
    seen = []
    for piece in order:  # "randomly choose the next unvisited piece"
        seen.append(piece)
        v = variance[piece]
        if budget is None:
            if v > threshold:
                break
        else:
            if v > threshold:
                budget -= v - threshold
            if budget <= 0:
                break
        threshold -= 0.15
    return sorted(seen)


def test_mar1_stops_at_the_first_piece_over_the_lowered_threshold() -> None:
    # order 0, 1, 2, 3: 0.5 <= 1.1, then T = 0.95 and 1.0 > 0.95: stop after piece 1
    uniform = np.array([[0.1, 0.2, 0.3, 0.4]])
    observed = visit_pieces(uniform, np.array([[0.5, 1.0, 2.0, 0.1]]), None)
    assert observed.tolist() == [[True, True, False, False]]
    # nothing informative: every piece is visited, so every piece is observed
    assert visit_pieces(uniform, np.zeros((1, 4)), None).all()


def test_mar2_spends_the_budget_on_the_excess_variance() -> None:
    # T = 0.5: B = 0.7 - 0.4 = 0.3; T = 0.35: B = 0.3 - 0.25 = 0.05; T = 0.2: B < 0, stop
    uniform = np.array([[0.1, 0.2, 0.3, 0.4]])
    observed = visit_pieces(uniform, np.array([[0.9, 0.6, 0.3, 5.0]]), 0.7)
    assert observed.tolist() == [[True, True, True, False]]
    # a smaller budget (the paper's ModelNet10 0.5) stops one piece earlier
    assert visit_pieces(uniform, np.array([[0.9, 0.6, 0.3, 5.0]]), 0.5).tolist() == [
        [True, True, False, False]
    ]


@pytest.mark.parametrize("budget", [None, 0.7])
def test_vectorised_visit_equals_the_printed_algorithm(budget: float | None) -> None:
    rng = np.random.default_rng(5)
    uniform = rng.random((2000, K))
    variance = rng.gamma(1.0, 0.6, size=(2000, K))
    observed = visit_pieces(uniform, variance, budget)
    for i in range(2000):
        order = [int(p) for p in np.argsort(uniform[i], kind="stable")]
        assert np.flatnonzero(observed[i]).tolist() == literal(order, variance[i].tolist(), budget)


def test_the_visiting_order_is_random() -> None:
    """Every piece informative: exactly the first visited piece is observed, and each block is
    that piece for about 1/K of the samples (no anchor block)."""
    n = 40_000
    blocks = [np.tile([-2.0, 2.0, -2.0, 2.0], (n, 1)) for _ in range(K)]  # variance 4 > 1.1
    observed = draw_observed(parse_mechanism("mar1"), blocks, np.zeros(K), np.random.default_rng(1))
    assert (observed.sum(axis=1) == 1).all()
    share = observed.mean(axis=0)
    assert np.abs(share - 1 / K).max() < 5 * np.sqrt((1 / K) * (1 - 1 / K) / n)


def test_frequencies_on_a_fixed_seed() -> None:
    """Pieces of four features with per-sample scales: MAR 1 and MAR 2 on seed 0, against the
    literal algorithms on the same draws (mean pieces observed, printed in the assertion)."""
    n = 5000
    gen = np.random.default_rng(0)
    scales = gen.uniform(0.0, 1.6, size=(n, K))
    blocks = [gen.normal(0, 1, (n, 4)) * scales[:, k : k + 1] for k in range(K)]
    variance = block_variances(blocks)
    for spec, budget in (("mar1", None), ("mar2", 0.7)):
        observed = draw_observed(
            parse_mechanism(spec), blocks, np.zeros(K), np.random.default_rng(0)
        )
        uniform = np.random.default_rng(0).random((n, K))  # the mechanism's own first draws
        want = np.zeros_like(observed)
        for i in range(n):
            order = [int(p) for p in np.argsort(uniform[i], kind="stable")]
            want[i, literal(order, variance[i].tolist(), budget)] = True
        assert np.array_equal(observed, want)
        assert observed.any(axis=1).all()  # the first piece is always observed
    mar1 = draw_observed(parse_mechanism("mar1"), blocks, np.zeros(K), np.random.default_rng(0))
    mar2 = draw_observed(parse_mechanism("mar2"), blocks, np.zeros(K), np.random.default_rng(0))
    # the fixed-seed frequencies: pieces observed per sample, and no block favoured (the order
    # is random, the pieces exchangeable)
    assert mar1.sum() / n == pytest.approx(5.2988) and mar2.sum() / n == pytest.approx(5.0392)
    for mask in (mar1, mar2):
        share = mask.mean(axis=0)
        assert share.max() - share.min() < 0.05


def test_the_scale_normalises_the_variance() -> None:
    """The same pieces scaled by 10 with scale 100 give the same mask (a piece's variance is
    read on the normalised scale)."""
    gen = np.random.default_rng(2)
    blocks = [gen.normal(0, gen.uniform(0.2, 1.5), (3000, 5)) for _ in range(K)]
    plain = draw_observed(parse_mechanism("mar2"), blocks, np.zeros(K), np.random.default_rng(4))
    scaled = draw_observed(
        parse_mechanism("mar2"),
        [b * 10 for b in blocks],
        np.zeros(K),
        np.random.default_rng(4),
        scale=100.0,
    )
    assert np.array_equal(plain, scaled)


def test_mar1_takes_no_parameter() -> None:
    with pytest.raises(ConfigError, match="mar1 takes no parameter"):
        parse_mechanism("mar1:0.5")
    assert parse_mechanism("mar2").p == 0.7 and parse_mechanism("mar2:0.5").p == 0.5
