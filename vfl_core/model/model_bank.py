"""A party's models: representation slots and heads, each with its own optimiser.

Most methods use one shared representation model f_k (slot key `()`) and at most one head g_k.
The combinatorial baseline keys both by subset. Models are built lazily but deterministically:
each one's initial weights come from (seed, block, key), whatever the order of creation.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from vfl_core.model.eager_optim import EagerAdam, EagerSGD
from vfl_core.model.linear_lane import lane_heads, lane_parameters
from vfl_core.model.lr_schedule import lr_at
from vfl_core.model.model_config import ModelConfig
from vfl_core.model.models import build_head, build_representation
from vfl_core.model.num_embeddings import NumericFit
from vfl_core.model.slots import CONCAT_HEAD, LINEAR_HEAD, SHARED, Subset
from vfl_core.model.slots import key_name as key_name
from vfl_core.model.slots import name_key as name_key
from vfl_core.model.weight_average import EMA, WeightAverage
from vfl_core.seeding import Stream, derive_seed


class OptimizerSettings(Protocol):
    """What `make_optimizer` reads of the run's configuration (vfl_core.config.TrainConfig)."""

    @property
    def optimizer(self) -> str: ...
    def learning_rate(self, tabular: bool, rows: int | None = None) -> float: ...
    @property
    def momentum(self) -> float: ...
    @property
    def weight_decay(self) -> float: ...
    @property
    def lane_weight_decay(self) -> float: ...
    @property
    def optimizer_kernel(self) -> str: ...


class HeadWidths(Protocol):
    """What a bank asks of the method (vfl_core.methods.spec.MethodSpec): a head's input width."""

    def head_input_blocks(self, head: Subset, num_blocks: int) -> int: ...


class BankSettings(OptimizerSettings, Protocol):
    """What a ModelBank reads of the run's configuration (vfl_core.config.TrainConfig): the
    model layer sits below the config and the methods, so it names only these."""

    @property
    def seed(self) -> int: ...
    @property
    def model(self) -> ModelConfig: ...
    def schedule(self, tabular: bool) -> str: ...
    @property
    def epochs(self) -> int: ...
    @property
    def spec(self) -> HeadWidths: ...
    @property
    def weight_average(self) -> str: ...
    @property
    def ema_decay(self) -> float: ...


def subset_code(key: Subset) -> tuple[int, ...]:
    """Seed parts of a key: nothing for the shared slot (so its seed is just (seed, block)), 0 for
    the concatenating head, 1 for the linear head (a subset's code is 2 or more)."""
    if key == CONCAT_HEAD:
        return (0,)
    if key == LINEAR_HEAD:
        return (1,)
    return () if key == SHARED else (1 + sum(1 << b for b in key),)


class ModelBank:
    def __init__(
        self,
        config: BankSettings,
        block: int,
        num_blocks: int,
        feature_shape: tuple[int, ...],
        num_classes: int,
        device: torch.device,
        *,
        categorical: tuple[int, ...] = (),
        train_rows: int | None = None,
        numeric: NumericFit | None = None,
    ) -> None:
        self.config = config
        # the party's own training rows: the "auto" rate of a table may follow them
        # (TrainConfig.learning_rate), the same in both transports
        self.train_rows = train_rows
        self.spec = config.spec_for(len(feature_shape) == 1)  # as its Party's
        self.block = block
        self.num_blocks = num_blocks
        self.feature_shape = feature_shape
        self.num_classes = num_classes
        self.categorical = categorical  # code columns' cardinalities (tabular parties)
        self.numeric = numeric  # numeric columns fitted on the training rows (num_embedding)
        self.device = device
        self.reps: dict[Subset, nn.Module] = {}
        self.heads: dict[Subset, nn.Module] = {}
        self.rep_opts: dict[Subset, torch.optim.Optimizer] = {}
        self.head_opts: dict[Subset, torch.optim.Optimizer] = {}
        # averaged weights that evaluate in place of the live ones (vfl_core.model.weight_average)
        average = config.weight_average == EMA
        self.average = WeightAverage(config.ema_decay) if average else None

    def rep(self, key: Subset) -> nn.Module:
        if key not in self.reps:
            seed = derive_seed(
                self.config.seed, Stream.INIT_REPRESENTATION, self.block, *subset_code(key)
            )
            model = build_representation(
                self.config.model,
                self.feature_shape,
                seed,
                categorical=self.categorical,
                numeric=self.numeric,
            )
            self.reps[key] = model.to(self.device)
            self.rep_opts[key] = make_optimizer(
                self.reps[key], self.config, self.tabular, self.train_rows
            )
            self._watch(_REP + key_name(key), self.reps[key], self.rep_opts[key])
        return self.reps[key]

    def install_rep(self, key: Subset, model: nn.Module) -> None:
        """Use `model` as the representation of slot `key` (a fixed tower the party built
        itself, vfl_core.privacy.private_tower), with an optimiser like every other's."""
        self.reps[key] = model.to(self.device)
        self.rep_opts[key] = make_optimizer(model, self.config, self.tabular, self.train_rows)
        self._watch(_REP + key_name(key), self.reps[key], self.rep_opts[key])

    def head(self, key: Subset) -> nn.Module:
        if key not in self.heads:
            seed = derive_seed(self.config.seed, Stream.INIT_HEAD, self.block, *subset_code(key))
            width = self.spec.head_input_blocks(key, self.num_blocks)
            model = lane_heads(
                self.config.model,
                key == LINEAR_HEAD,
                self.num_classes,
                seed,
                width,
                lambda: build_head(
                    self.config.model, self.num_classes, seed, in_blocks=width, tabular=self.tabular
                ),
            )
            self.heads[key] = model.to(self.device)
            self.head_opts[key] = make_optimizer(
                self.heads[key], self.config, self.tabular, self.train_rows
            )
            self._watch(_HEAD + key_name(key), self.heads[key], self.head_opts[key])
        return self.heads[key]

    def _watch(self, name: str, module: nn.Module, opt: torch.optim.Optimizer) -> None:
        if self.average is not None:
            self.average.watch(name, module, opt)

    # Evaluation (an evaluation split's Embed, Predict, a serving bundle) runs on these: the
    # averaged weights with --weight-average, else the live module.
    def evaluated_rep(self, key: Subset) -> nn.Module:
        module = self.rep(key)
        if self.average is None:
            return module
        return self.average.evaluated(_REP + key_name(key), module)

    def evaluated_head(self, key: Subset) -> nn.Module:
        module = self.head(key)
        if self.average is None:
            return module
        return self.average.evaluated(_HEAD + key_name(key), module)

    @property
    def tabular(self) -> bool:
        """Whether this party's features are vectors (a table's row), not images."""
        return len(self.feature_shape) == 1

    def set_lr(self, opts: list[torch.optim.Optimizer], epoch: int) -> None:
        # per party, as the head is (models.resolve_head): "auto" is decay for tabular features
        cfg = self.config
        start = cfg.learning_rate(self.tabular, self.train_rows)
        rate = lr_at(start, cfg.schedule(self.tabular), epoch, cfg.epochs)
        for opt in opts:
            for group in opt.param_groups:
                group["lr"] = rate

    def parameters_vector(self) -> torch.Tensor:
        modules = [self.reps[k] for k in sorted(self.reps)] + [
            self.heads[k] for k in sorted(self.heads)
        ]
        return torch.cat([p.detach().cpu().reshape(-1) for m in modules for p in m.parameters()])

    def state_dict(self) -> dict[str, object]:
        state: dict[str, object] = {
            "reps": {key_name(k): m.state_dict() for k, m in self.reps.items()},
            "rep_opts": {key_name(k): o.state_dict() for k, o in self.rep_opts.items()},
            "heads": {key_name(k): m.state_dict() for k, m in self.heads.items()},
            "head_opts": {key_name(k): o.state_dict() for k, o in self.head_opts.items()},
        }
        if self.average is not None:  # with the weights, so a restored party resumes them
            for entry, kind, keys in (
                ("avg_reps", _REP, self.reps),
                ("avg_heads", _HEAD, self.heads),
            ):
                names = {key_name(k): kind + key_name(k) for k in keys}
                averages = self.average.state_dict(list(names.values()))
                state[entry] = {n: averages[full] for n, full in names.items() if full in averages}
        return state

    def load_state_dict(self, state: dict) -> None:
        for name, sd in state["reps"].items():
            self.rep(name_key(name)).load_state_dict(sd)
            self.rep_opts[name_key(name)].load_state_dict(state["rep_opts"][name])
            self._load_average(state, "avg_reps", _REP, name, self.reps[name_key(name)])
        for name, sd in state["heads"].items():
            self.head(name_key(name)).load_state_dict(sd)
            self.head_opts[name_key(name)].load_state_dict(state["head_opts"][name])
            self._load_average(state, "avg_heads", _HEAD, name, self.heads[name_key(name)])

    def _load_average(
        self, state: dict, entry: str, kind: str, name: str, module: nn.Module
    ) -> None:
        """The average of a module loaded from `state` (none there: it has none yet, as a
        state saved before its first step; a state of a run without averages: from scratch)."""
        if self.average is not None:
            self.average.load(kind + name, module, state.get(entry, {}).get(name))


_REP, _HEAD = "rep:", "head:"  # WeightAverage's names of a slot's tower and of a head


def make_optimizer(
    module: nn.Module,
    config: OptimizerSettings,
    tabular: bool = False,
    rows: int | None = None,
) -> torch.optim.Optimizer:
    """torch's SGD or Adam, as `EagerSGD` / `EagerAdam` (vfl_core.model.eager_optim: the same
    updates, without torch._dynamo's second of imports), at the run's learning rate for a party
    of tabular features (or not) holding `rows` training rows; torch's fused kernel or its
    per-weight loop (`optimizer_kernel`: a tabular round steps many small weights, and the
    loop's Python costs per weight, docs/tabular-defaults.md). The linear model's weights in
    `module` (vfl_core.model.linear_lane.lane_parameters) are a group of their own, penalised
    by `lane_weight_decay` instead of `weight_decay`."""
    lr = config.learning_rate(tabular, rows)
    fused = config.optimizer_kernel == "fused"
    params = _groups(module, config)
    if config.optimizer == "sgd":
        return EagerSGD(
            params, lr=lr, momentum=config.momentum, weight_decay=config.weight_decay, fused=fused
        )
    return EagerAdam(params, lr=lr, weight_decay=config.weight_decay, fused=fused)


def _groups(module: nn.Module, config: OptimizerSettings) -> list:
    """`module`'s weights, or (where it holds the linear model's) groups: the rest, if any,
    then the linear model's with its own weight decay."""
    lanes = lane_parameters(module)
    if not lanes:
        return list(module.parameters())
    ids = {id(p) for p in lanes}
    rest = [p for p in module.parameters() if id(p) not in ids]
    own = {"params": lanes, "weight_decay": config.lane_weight_decay}
    return [{"params": rest}, own] if rest else [own]
