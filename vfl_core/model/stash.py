"""Weight stashing for pipelined training with bounded staleness (TrainConfig.staleness > 0).

With several rounds in flight, a party embeds round t+1 before the gradient of round t arrives,
and f_k steps in between. The embedding of a round must then be differentiated with respect to
the weights that computed it (PipeDream's weight stashing): the forward pass runs on a detached
copy of the parameters, the backward pass takes the gradient with respect to that copy and hands
it to the live parameters, which the optimiser then steps. Without the copy, autograd refuses to
backpropagate through weights an optimiser has changed in place. Rounds embedded with no step in
between share one copy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

Stash = dict[str, torch.Tensor]  # parameter name -> detached copy that requires grad


def snapshot(model: nn.Module) -> Stash:
    return {n: p.detach().clone().requires_grad_(True) for n, p in model.named_parameters()}


def forward(model: nn.Module, stash: Stash, x: torch.Tensor) -> torch.Tensor:
    """`model(x)` computed with the stashed parameters (buffers are the model's own): the
    module's parameters swapped for them for the call, as torch.func.functional_call does, the
    same operations on the same tensors. Not through functional_call: its general machinery
    (tied weights, strictness, buffers, parametrisations) runs on every stale round, for a
    tabular tower whose forward is itself a few small operations. The towers tie no weights:
    each stashed name is its own parameter."""
    slots = [_slot(model, name) for name in stash]
    live = [module._parameters[leaf] for module, leaf in slots]
    try:
        for (module, leaf), name in zip(slots, stash, strict=True):
            module._parameters[leaf] = stash[name]  # a plain tensor: not through __setattr__
        return model(x)
    finally:
        for (module, leaf), parameter in zip(slots, live, strict=True):
            module._parameters[leaf] = parameter


def _slot(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    """The module holding parameter `name` (dotted, as named_parameters gives it) and its own
    name for it."""
    path, _, leaf = name.rpartition(".")
    return model.get_submodule(path), leaf


def backward_into(
    output: torch.Tensor,
    grad: torch.Tensor,
    models: Sequence[nn.Module],
    stashes: Sequence[Mapping[str, torch.Tensor]],
) -> None:
    """d(output)/d(stashed parameters) * grad, written to the live parameters' .grad (None where
    a parameter did not take part, as after an ordinary backward)."""
    pairs = [
        (p, stash[n]) for model, stash in zip(models, stashes, strict=True)
        for n, p in model.named_parameters()
    ]  # fmt: skip
    grads = torch.autograd.grad(output, [s for _, s in pairs], grad, allow_unused=True)
    for (live, _), g in zip(pairs, grads, strict=True):
        live.grad = g
