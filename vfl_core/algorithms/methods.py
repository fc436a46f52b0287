"""The training methods of the paper's Table 1 and the fault benchmark: one frozen `MethodSpec`
each (`vfl_core.algorithms.method_spec`), in a registry keyed by the name `--method` takes.

laser          one head per label party on the mean of any subset containing it, LASER task sampling
local          each party on its own block alone
ensemble       local predictors; at inference the observing parties vote (random tie-break)
svfl           standard VFL: one head at the active party on the concatenation of all K blocks,
               trained on fully observed batches only; a sample with a missing block gets a random
               prediction, as in the paper
vanilla        the DLVM paper's Vanilla VFL: svfl's training, but at inference the active party
               predicts for any observed set with zeros in place of the missing embeddings
combinatorial  one independent predictor per subset S (own representation models and a head at the
               lowest label block of S), used for exactly the observed set
plug           PlugVFL: the active party's head on the concatenation with zeros for missing blocks,
               party-wise dropout of observed embeddings while training
zerofill       split learning that zero-fills a missing party's embedding (PlugVFL without dropout)
stale          split learning that reuses the last embedding the active party received from a
               missing party for the same training sample (zeros if it never had one, and at
               inference, where no test sample has a past embedding)
The last two, with `svfl` (which skips a round unless every party answered), are the split-learning
baselines of the fault benchmark (DVFL's setting): they differ only in what replaces a party that
failed during training.
dvfl           Decoupled VFL (vfl_core.methods.dvfl): guests, hosts and a label owner each on an
               objective of its own, no gradient across parties; its own round program and
               steps (vfl_core.methods.dvfl.spec, .program, .steps); the label owner is its one
               predictor
dlvm           the latent-variable VFL (DLVM-VFL, vfl_core.methods.dlvm): each party's Gaussian
               expert of a shared latent h and its decoder, trained on every sample by an
               importance-weighted bound, then the active party's classifier p(y | h) on its
               labelled rows; its own round program and steps (vfl_core.methods.dlvm.spec,
               .program, .steps)
The active party is the lowest block that holds labels.

A new method is one more spec in `_SPECS`, or, from outside vfl_core, a module named in
VFL_METHOD_MODULES that calls `register(spec)`; one whose phases are not Embed/Fuse/Backward
gives its spec a `program` (method_spec.RoundProgram) and its `steps` (vfl_core.methods).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterator, Mapping
from types import MappingProxyType

from vfl_core.algorithms.laser import head_tasks
from vfl_core.algorithms.method_spec import (
    SHARED,
    HeadTask,
    MethodSpec,
    TaskContext,
    active_party,
    all_subsets,
    owner,
)
from vfl_core.errors import ConfigError, ProtocolError
from vfl_core.methods.dlvm.spec import DLVM_SPEC
from vfl_core.methods.dvfl.spec import DVFL_SPEC
from vfl_core.methods.steps import StepSpec

log = logging.getLogger(__name__)

PLUG_DROPOUT = 0.5  # probability that an observed non-active block is dropped in a PlugVFL step


# ---------------------------------------------------------------- task rules (loss terms per batch)


def laser_tasks(c: TaskContext) -> list[HeadTask]:
    """One sampled subset per size containing the party, weighted a_i, then one per size of the
    present feature-only blocks, weighted b_i (vfl_core.algorithms.laser)."""
    tasks = head_tasks(c.block, c.present, c.unlabelled, c.rng)
    return [HeadTask(SHARED, s, w) for s, w in tasks]


def own_block_task(c: TaskContext) -> list[HeadTask]:
    return [HeadTask(SHARED, (c.block,), 1.0)]


def full_set_task(c: TaskContext) -> list[HeadTask]:
    """The active party on a fully observed batch (standard VFL)."""
    full = len(c.present) == c.num_blocks and c.block == active_party(c.label_blocks)
    return [HeadTask(SHARED, c.present, 1.0)] if full else []


def present_task(c: TaskContext) -> list[HeadTask]:
    """The active party on whatever blocks it has (absent ones filled in by the fusion)."""
    active = c.block == active_party(c.label_blocks)
    return [HeadTask(SHARED, c.present, 1.0)] if active else []


def plug_task(c: TaskContext) -> list[HeadTask]:
    """The active party on the present blocks, each other block dropped with PLUG_DROPOUT."""
    if c.block != active_party(c.label_blocks):
        return []
    kept = [b for b in c.present if b == c.block or c.rng.random() >= PLUG_DROPOUT]
    return [HeadTask(SHARED, tuple(kept), 1.0)]


def subset_tasks(c: TaskContext) -> list[HeadTask]:
    """One term per subset of the present blocks that this party owns, on its own head."""
    return [
        HeadTask(s, s, 1.0) for s in all_subsets(c.present) if owner(s, c.label_blocks) == c.block
    ]


# ---------------------------------------------------------------- the registry

_SPECS: tuple[MethodSpec, ...] = (
    MethodSpec(
        name="laser",
        display_name="LASER-VFL",
        fusion="mean",
        slots="shared",
        heads="label_parties",
        tasks=laser_tasks,
        combination="heads",
        replacement="nothing",
        serves_feature_only=True,
    ),
    MethodSpec(
        name="local",
        display_name="Local",
        fusion="mean",
        slots="shared",
        heads="label_parties",
        tasks=own_block_task,
        combination="heads",
        replacement="nothing",
        own_block_only=True,
    ),
    MethodSpec(
        name="ensemble",
        display_name="Ensemble",
        fusion="mean",
        slots="shared",
        heads="label_parties",
        tasks=own_block_task,
        combination="vote",
        replacement="nothing",
        own_block_only=True,
    ),
    MethodSpec(
        name="svfl",
        display_name="Standard VFL",
        fusion="concat",
        slots="shared",
        heads="active_party",
        tasks=full_set_task,
        combination="heads",
        replacement="skip",
        needs_all_blocks=True,
    ),
    MethodSpec(
        name="vanilla",
        display_name="Vanilla VFL",
        fusion="concat",
        slots="shared",
        heads="active_party",
        tasks=full_set_task,
        combination="heads",
        replacement="skip",
        needs_all_blocks=True,
        zero_imputes=True,
    ),
    MethodSpec(
        name="combinatorial",
        display_name="Combinatorial",
        fusion="concat_slots",
        slots="per_subset",
        heads="subset_owner",
        tasks=subset_tasks,
        combination="subset",
        replacement="nothing",
    ),
    MethodSpec(
        name="plug",
        display_name="PlugVFL",
        fusion="concat",
        slots="shared",
        heads="active_party",
        tasks=plug_task,
        combination="heads",
        replacement="zeros",
    ),
    MethodSpec(
        name="zerofill",
        display_name="Zero-fill split learning",
        fusion="concat",
        slots="shared",
        heads="active_party",
        tasks=present_task,
        combination="heads",
        replacement="zeros",
    ),
    MethodSpec(
        name="stale",
        display_name="Stale-embedding split learning",
        fusion="concat",
        slots="shared",
        heads="active_party",
        tasks=present_task,
        combination="heads",
        replacement="stale",
    ),
    DVFL_SPEC,
    DLVM_SPEC,
)


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
