"""vfl_core.model.eager_optim: torch's Adam and SGD updates, bit for bit, without importing
torch._dynamo (the second of CPU every client process paid on its first optimiser)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from vfl_core.model.eager_optim import EagerAdam, EagerSGD

# Trains a small model with the given optimiser class for 6 steps (closure steps included) and
# prints its final weights, its state dict's step counts and whether torch._dynamo was imported.
_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from vfl_core.model.eager_optim import EagerAdam, EagerSGD
    from tests.test_eager_optim import train
    cls = {"EagerAdam": EagerAdam, "EagerSGD": EagerSGD}[sys.argv[1]]
    weights, state = train(cls, sys.argv[1], sys.argv[2] == "fused")
    print(json.dumps({"weights": weights, "state": state,
                      "dynamo": "torch._dynamo" in sys.modules}))
    """
)

_SETTINGS = {
    "EagerAdam": (torch.optim.Adam, {"lr": 0.05, "weight_decay": 1e-3}),
    "EagerSGD": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3}),
}


def train(
    cls: type[torch.optim.Optimizer], name: str, fused: bool = False
) -> tuple[list[float], list[float]]:
    """Six steps of a seeded 4 -> 3 -> 2 model with `cls` and `name`'s settings (torch's fused
    kernel or its loop); its weights and the optimiser's state (every tensor, flattened) after
    a save and a load."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    optimiser = cls(model.parameters(), **_SETTINGS[name][1], fused=fused)
    data = torch.randn(6, 8, 4)
    for k, x in enumerate(data):

        def loss(x: torch.Tensor = x) -> torch.Tensor:
            optimiser.zero_grad()
            value = model(x).pow(2).mean()
            value.backward()
            return value

        if k % 2:
            optimiser.step(loss)
        else:
            loss()
            optimiser.step()
    optimiser.load_state_dict(optimiser.state_dict())
    state = [
        value
        for per_param in optimiser.state.values()
        for _, tensor in sorted(per_param.items())
        for value in torch.as_tensor(tensor).flatten().tolist()
    ]
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    return weights, state


@pytest.mark.parametrize("kernel", ["loop", "fused"])
@pytest.mark.parametrize("name", ["EagerAdam", "EagerSGD"])
def test_same_updates_as_torch_and_no_dynamo_import(name: str, kernel: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, name, kernel], capture_output=True, text=True, check=True
    )
    eager = json.loads(out.stdout)
    assert eager["dynamo"] is False
    torch_weights, torch_state = train(_SETTINGS[name][0], name, kernel == "fused")
    assert eager["weights"] == torch_weights  # bit for bit: the same floats
    assert eager["state"] == torch_state
    assert len(eager["state"]) > 0


def test_state_dicts_load_across_torch_and_eager() -> None:
    model = torch.nn.Linear(3, 1)
    torch_adam = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(2, 3)).sum().backward()
    torch_adam.step()
    eager = EagerAdam(model.parameters(), lr=0.1)
    eager.load_state_dict(torch_adam.state_dict())
    assert eager.state_dict()["state"][0]["step"] == torch_adam.state_dict()["state"][0]["step"]
    assert isinstance(EagerSGD(model.parameters(), lr=0.1), torch.optim.SGD)


def test_given_a_plain_adam_and_dynamo_when_stepped_then_each_step_hook_runs_once() -> None:
    # torch wraps a class's step in its hook runner when the first instance is built: once a
    # plain Adam exists, going through Adam.step from EagerAdam ran every hook twice (an
    # averaged weight, --weight-average ema, then moved twice a step)
    code = (
        "import torch, torch._dynamo\n"
        "from torch import nn\n"
        "from vfl_core.model.eager_optim import EagerAdam\n"
        "torch.optim.Adam(nn.Linear(2, 2).parameters())\n"
        "m = nn.Linear(2, 2); opt = EagerAdam(m.parameters(), lr=0.1); calls = []\n"
        "opt.register_step_post_hook(lambda *a: calls.append(1))\n"
        "for _ in range(3):\n"
        "    opt.zero_grad(); m(torch.ones(1, 2)).sum().backward(); opt.step()\n"
        "print(len(calls))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "3", out.stdout + out.stderr


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_given_the_run_config_then_make_optimizer_takes_its_kernel(optimizer: str) -> None:
    from vfl_core.config import TrainConfig
    from vfl_core.model.model_bank import make_optimizer

    torch.manual_seed(0)
    x = torch.randn(8, 4)
    weights = {}
    for kernel in ("fused", "loop"):
        torch.manual_seed(1)
        model = torch.nn.Linear(4, 2)
        config = TrainConfig(optimizer=optimizer, optimizer_kernel=kernel)
        opt = make_optimizer(model, config, tabular=True, rows=100)
        assert bool(opt.defaults["fused"]) is (kernel == "fused")
        for _ in range(5):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        weights[kernel] = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert TrainConfig().optimizer_kernel == "fused"  # the default
    # the same rule: the floats may differ only in their last bits
    torch.testing.assert_close(weights["fused"], weights["loop"], rtol=1e-5, atol=1e-6)
