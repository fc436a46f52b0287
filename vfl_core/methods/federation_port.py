"""What a method's round program may ask of the round engine: a small port that
vfl_core.training.engine.Federation satisfies.

The methods layer sits below the training layer (docs/architecture.md, "The round engine"), so a
program is typed against this protocol instead of importing the engine. The port names the run's
facts (config, parties, alignments), its transport and liveness, the liveness clock and the two
ways a program records who answered a phase.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from vfl_core.data.batch_plan import Alignment, Batch
    from vfl_core.methods.combination import Combination
    from vfl_core.methods.liveness import Liveness
    from vfl_core.protocol import PartyInfo, Transport


class MethodFacts(Protocol):
    """What a round program reads of its method through the port (vfl_core.methods.spec.MethodSpec
    is one): how the heads' answers combine."""

    @property
    def combination(self) -> Combination: ...


class FederationPort(Protocol):
    """The round engine as a method's program sees it."""

    config: Any  # the run's vfl_core.config.TrainConfig (a layer above this one)
    transport: Transport
    infos: dict[int, PartyInfo]
    alignments: dict[str, Alignment]
    liveness: Liveness
    program_state: Any  # what the method's program keeps for this run (ProgramRounds.run)
    down_after: int
    retry_every: int

    @property
    def spec(self) -> MethodFacts: ...
    @property
    def label_blocks(self) -> tuple[int, ...]: ...
    @property
    def num_blocks(self) -> int: ...
    @property
    def num_classes(self) -> int: ...
    @property
    def task(self) -> str: ...
    @property
    def tick(self) -> int:
        """The liveness clock: advances with every training round and inference batch."""
        ...

    def eval_rng(self, batch: Batch) -> np.random.Generator:
        """The random draws of an inference batch, keyed by its samples."""
        ...

    def record(
        self,
        expected: Iterable[int],
        got: Container[int],
        phase: str,
        where: str,
        immediate: bool = False,
        tick: int | None = None,
    ) -> None:
        """Who of `expected` answered `phase` (in `got`): each answer or miss goes into the
        liveness; `immediate` marks a miss down at once (a caller is waiting)."""
        ...

    def accept(
        self,
        answers: dict[int, np.ndarray],
        callees: tuple[int, ...],
        size: int,
        phase: str,
        where: str,
        immediate: bool = False,
        tick: int | None = None,
    ) -> dict[int, np.ndarray]:
        """The embeddings of `answers` that are well formed (size x width, finite float32),
        recorded as `record` does."""
        ...

    def inference_embeddings(
        self, split: str, batch: Batch, request: int, blocks: Collection[int] | None
    ) -> tuple[dict[int, np.ndarray], tuple[int, ...]]:
        """An inference batch's embeddings from the live parties (of `blocks`), and who was
        called."""
        ...
