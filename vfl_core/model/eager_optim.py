"""torch's Adam and SGD without the import of torch._dynamo that their first use pays.

torch imports torch._dynamo (and sympy, mpmath ...: about 820 modules) the first time an
optimiser is built or steps, only so that `torch.compile` would not trace it: 0.9-1.2 s of CPU in
every client and simulation process, and again in every restarted client (benchmarks/results/
test_time.md). This project never compiles, and outside a compiled region what torch runs there
is the plain function:
- `add_param_group`, `zero_grad`, `state_dict`, `load_state_dict` are wrapped by
  `torch._disable_dynamo`, which looks for the function to call cached on
  `fn.__dynamo_disable` before it imports anything: `skip_dynamo_import` caches each as itself;
- `Adam.step` and `SGD.step` are wrapped by `_use_grad_for_differentiable`, which sets autograd
  to the optimiser's `differentiable` flag and calls `torch._dynamo.graph_break()` (a no-op
  outside a compiled region) around the update: `EagerAdam` / `EagerSGD` do the first without
  the second. Their updates are torch's own functions, bit for bit (tests/test_eager_optim.py).
A no-op where torch._dynamo is already imported (a program that may compile keeps torch's
behaviour) or where torch's wrappers have another shape than this module knows.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator

import torch

_CACHE = "__dynamo_disable"  # torch._compile._disable_dynamo's cache attribute


class _EagerStep:
    """`step` as torch's, without its graph breaks (see the module's doc)."""

    defaults: dict

    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        torch_step = super().step  # type: ignore[misc]
        func = getattr(torch_step, "__func__", torch_step)
        # Once a plain instance of the parent class exists, torch has wrapped the parent's step
        # in its hook runner too (Optimizer._patch_step_function): this class's own step is
        # wrapped already, so going through the parent's would run every step hook twice.
        while getattr(func, "hooked", False):
            func = func.__wrapped__
        plain = getattr(func, "__wrapped__", None)
        if plain is None or "torch._dynamo" in sys.modules:
            return func(self, closure)
        previous = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(self.defaults["differentiable"])
            return plain(self, closure)
        finally:
            torch.set_grad_enabled(previous)


class EagerAdam(_EagerStep, torch.optim.Adam):
    """torch.optim.Adam, never importing torch._dynamo."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        skip_dynamo_import()
        super().__init__(*args, **kwargs)


class EagerSGD(_EagerStep, torch.optim.SGD):
    """torch.optim.SGD, never importing torch._dynamo."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        skip_dynamo_import()
        super().__init__(*args, **kwargs)


def skip_dynamo_import() -> int:
    """Cache every dynamo-disabled function of torch.optim as itself; how many were cached."""
    if "torch._dynamo" in sys.modules:
        return 0
    cached = 0
    for fn in _disabled_functions():
        if getattr(fn, _CACHE, None) is None:
            setattr(fn, _CACHE, fn)
            cached += 1
    return cached


def _disabled_functions() -> Iterator[Callable]:
    """The functions torch._disable_dynamo wraps among torch.optim's optimiser classes."""
    inner = _decorator_code()
    if inner is None:
        return
    classes = [torch.optim.Optimizer, *_subclasses(torch.optim.Optimizer)]
    for cls in classes:
        for value in vars(cls).values():
            fn = getattr(value, "__func__", value)  # classmethods and staticmethods too
            wrapped = getattr(fn, "__wrapped__", None)
            if wrapped is not None and getattr(fn, "__code__", None) is inner:
                yield wrapped


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _decorator_code() -> object | None:
    """The code object of the wrapper torch._disable_dynamo returns, or None where torch's
    decorator is not the one this module knows (then nothing is changed)."""
    try:
        probe = torch._disable_dynamo(lambda: None)
    except Exception:  # an unknown torch: leave it as it is
        return None
    code = getattr(probe, "__code__", None)
    closure = inspect.getclosurevars(probe).nonlocals if code is not None else {}
    return code if "fn" in closure else None
