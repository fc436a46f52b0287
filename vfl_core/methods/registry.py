"""The registry of training methods by name, as `--method` takes them: one frozen `MethodSpec`
each (vfl_core.methods.spec).

Built in: LASER-VFL and its baselines (vfl_core.methods.laser: laser, local, ensemble, svfl,
combinatorial, plug, zerofill, stale), Decoupled VFL (vfl_core.methods.dvfl: guests, hosts and a
label owner each on an objective of its own, no gradient across parties, its own round program
and steps; the label owner is its one predictor) and the latent-variable VFL (DLVM-VFL,
vfl_core.methods.dlvm: each party's Gaussian expert of a shared latent h and its decoder, trained
on every sample by an importance-weighted bound, then the active party's classifier p(y | h) on
its labelled rows; its own round program and steps).

A new built-in method is a package under vfl_core/methods/ whose spec joins `_SPECS` here; from
outside vfl_core, a module named in VFL_METHOD_MODULES that calls `register(spec)`. One whose
phases are not Embed/Fuse/Backward gives its spec a `program` (vfl_core.methods.spec.RoundProgram)
and its `steps` (vfl_core.methods.steps).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterator, Mapping
from types import MappingProxyType

from vfl_core.errors import ConfigError, ProtocolError
from vfl_core.methods.dlvm.spec import DLVM_SPEC
from vfl_core.methods.dvfl.spec import DVFL_SPEC
from vfl_core.methods.laser.specs import LASER_SPECS
from vfl_core.methods.spec import MethodSpec
from vfl_core.methods.steps import StepSpec

log = logging.getLogger(__name__)

_SPECS: tuple[MethodSpec, ...] = (*LASER_SPECS, DVFL_SPEC, DLVM_SPEC)


class _Registry(Mapping[str, MethodSpec]):
    """The methods by name: the built-in specs, then those of the plug-in modules named in
    PLUGIN_ENV, imported on first use (a process that never asks imports none)."""

    def __init__(self, specs: tuple[MethodSpec, ...]) -> None:
        self._specs = {s.name: s for s in specs}
        self._loaded = False
        self.failed: list[str] = []  # plug-in modules that could not be imported, and why

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True  # first: a plug-in module calls register() while it is imported
        for module in filter(None, (m.strip() for m in os.environ.get(PLUGIN_ENV, "").split(","))):
            try:
                importlib.import_module(module)
            except Exception as err:  # its methods are unknown: say why where they are asked for
                why = f"{PLUGIN_ENV}: cannot import method module {module!r}: {err}"
                self.failed.append(why)
                log.error("%s", why)
                continue
            log.info("method module %s imported", module)

    def add(self, spec: MethodSpec) -> None:
        known = self._specs.get(spec.name)
        if known is not None and known is not spec:
            raise ConfigError(f"method {spec.name!r} is registered already")
        self._specs[spec.name] = spec

    def remove(self, name: str) -> None:
        if name in METHODS:
            raise ConfigError(f"method {name!r} is built in: it cannot be unregistered")
        self._specs.pop(name, None)

    def __getitem__(self, name: str) -> MethodSpec:
        self._load()
        return self._specs[name]

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(list(self._specs))

    def __len__(self) -> int:
        self._load()
        return len(self._specs)


# A comma-separated list of modules that register methods of their own (register(spec)) when
# imported; the client and the coordinator of one federation need the same list.
PLUGIN_ENV = "VFL_METHOD_MODULES"
REGISTRY = _Registry(_SPECS)
METHODS: tuple[str, ...] = tuple(s.name for s in _SPECS)  # built-in names, laser (default) first
# How reports and the demo name each built-in method (the paper's names where it has one).
METHOD_NAMES: Mapping[str, str] = MappingProxyType({s.name: s.display_name for s in _SPECS})


def register(spec: MethodSpec) -> MethodSpec:
    """Add a method from outside vfl_core (a plug-in module names itself in PLUGIN_ENV and
    calls this when imported); registering the same spec again is a no-op."""
    REGISTRY.add(spec)
    return spec


def unregister(name: str) -> None:
    """Remove a plug-in method (a test that registered one leaves the registry as it found it)."""
    REGISTRY.remove(name)


def method_spec(name: str) -> MethodSpec:
    """The spec of method `name`; an unknown name is a ConfigError listing the known ones."""
    if name not in REGISTRY:
        raise ConfigError(unknown_method(name))
    return REGISTRY[name]


def step_spec(method: str, step: str) -> StepSpec:
    """Step `step` of method `method`, as a call off the wire names them; either unknown is a
    ProtocolError (INVALID_ARGUMENT), before anything else of the call is read."""
    if method not in REGISTRY:
        raise ProtocolError(f"step: unknown method {method[:64]!r}")
    return REGISTRY[method].step(step)


def unknown_method(name: str) -> str:
    """The one line that refuses an unknown method name."""
    failed = "".join(f" ({why})" for why in REGISTRY.failed)
    return f"unknown method {name!r}; choose from {', '.join(REGISTRY)}{failed}"
