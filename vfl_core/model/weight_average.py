"""Averaged weights of a party's models (TrainConfig.weight_average; Polyak & Juditsky 1992).

With "ema" each representation slot and head of a ModelBank gets a copy that follows the live
module as an exponential moving average, updated after every step of the module's own optimiser:
a_1 = w_1 and a_t = decay * a_{t-1} + (1 - decay) * w_t (starting at the first step's weights, so
the drawn initial weights carry no weight; a tower pretrained before its first step, or a fixed
one that never steps, is averaged from where it is then). Training steps use the live weights;
evaluation (Embed of an evaluation split, Predict, a serving bundle) uses the copy. Everything
stays in the party: nothing crosses the wire, and both transports run this same code.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

EMA = "ema"


class WeightAverage:
    """The averaged copies of one bank's modules, by name ("rep:..." / "head:...")."""

    def __init__(self, decay: float) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"ema decay must be in [0, 1), not {decay}")
        self.decay = decay
        self.copies: dict[str, nn.Module] = {}

    def watch(self, name: str, module: nn.Module, opt: torch.optim.Optimizer) -> None:
        """Average `module` after every step of `opt` (its optimiser), under `name`."""
        self.copies.pop(name, None)  # a module installed again starts its own average
        opt.register_step_post_hook(lambda _opt, _args, _kwargs: self.update(name, module))

    def update(self, name: str, module: nn.Module) -> None:
        """One step of the average of `module` (the first: a copy of its weights)."""
        average = self.copies.get(name)
        if average is None:
            self.copies[name] = _frozen_copy(module)
            return
        with torch.no_grad():
            live = list(module.parameters())
            torch._foreach_lerp_(list(average.parameters()), live, 1.0 - self.decay)
            for kept, buffer in zip(average.buffers(), module.buffers(), strict=True):
                kept.copy_(buffer)  # running statistics, counters: the live module's own

    def evaluated(self, name: str, module: nn.Module) -> nn.Module:
        """What evaluates in place of `module`: its average once it has stepped, else itself."""
        return self.copies.get(name, module)

    def state_dict(self, names: list[str]) -> dict[str, dict]:
        """The averages of `names` that exist (one that never stepped has none)."""
        return {n: self.copies[n].state_dict() for n in names if n in self.copies}

    def load(self, name: str, module: nn.Module, state: dict | None) -> None:
        """Set the average of `module` from a state_dict (None: it has none yet)."""
        if state is None:
            self.copies.pop(name, None)
            return
        average = self.copies.get(name) or _frozen_copy(module)
        average.load_state_dict(state)
        self.copies[name] = average


def _frozen_copy(module: nn.Module) -> nn.Module:
    """A copy of `module` in evaluation mode that no optimiser or autograd touches."""
    average = copy.deepcopy(module)
    average.eval()
    for p in average.parameters():
        p.requires_grad_(False)
    return average
