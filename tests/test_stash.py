"""vfl_core.model.stash: a stale round's forward on the stashed weights is torch.func's
functional_call, bit for bit, and the model keeps its own parameters after it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vfl_core.model import stash
from vfl_core.model.linear_lane import LaneTower


def _tower() -> nn.Module:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    return LaneTower(mlp, 6, (4,), 2)  # nested modules, a code column's embedding


def test_given_a_stash_when_forwarded_then_outputs_and_grads_are_functional_calls() -> None:
    model = _tower()
    x = torch.cat([torch.randn(7, 5), torch.randint(0, 4, (7, 1)).float()], dim=1)
    saved = stash.snapshot(model)
    with torch.no_grad():  # the live weights move on, as an optimiser step would move them
        for p in model.parameters():
            p.add_(0.5)
    live = {n: p.detach().clone() for n, p in model.named_parameters()}
    ours = stash.forward(model, saved, x)
    theirs_stash = {n: t.detach().clone().requires_grad_(True) for n, t in saved.items()}
    theirs = torch.func.functional_call(model, theirs_stash, (x,))
    assert torch.equal(ours, theirs)
    grad = torch.randn_like(ours)
    ours_grads = torch.autograd.grad(ours, list(saved.values()), grad, allow_unused=True)
    their_grads = torch.autograd.grad(theirs, list(theirs_stash.values()), grad, allow_unused=True)
    for a, b in zip(ours_grads, their_grads, strict=True):
        assert (a is None and b is None) or torch.equal(a, b)
    # the model's own parameters are back, unchanged, and are parameters still
    for name, p in model.named_parameters():
        assert isinstance(p, nn.Parameter)
        assert torch.equal(p, live[name])
    assert not torch.equal(model(x), ours)


def test_given_a_forward_that_raises_then_the_live_parameters_are_back() -> None:
    model = _tower()
    live = dict(model.named_parameters())
    with pytest.raises(RuntimeError):
        stash.forward(model, stash.snapshot(model), torch.randn(3, 2))  # the wrong width
    assert dict(model.named_parameters()) == live
