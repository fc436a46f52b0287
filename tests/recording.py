"""An in-process transport that keeps the calls the engine makes, for tests that audit what a
step asked of the parties (which split, which rows, which head)."""

from __future__ import annotations

import numpy as np

from vfl_core.protocol import EmbedCall, PredictCall, ScoreCall, ScoreResult
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party


class RecordingTransport(InProcessTransport):
    """The in-process transport, keeping every Embed, Score and Predict call."""

    def __init__(self, parties: dict[int, Party]) -> None:
        super().__init__(parties)
        self.embeds: list[tuple[int, EmbedCall]] = []
        self.scores: list[tuple[int, ScoreCall]] = []
        self.predicts: list[tuple[int, PredictCall]] = []

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]:
        self.embeds += list(calls.items())
        return super().embed(calls)

    def score(self, block: int, call: ScoreCall) -> ScoreResult | None:
        self.scores.append((block, call))
        return super().score(block, call)

    def predict(self, calls: dict[int, PredictCall]) -> dict[int, np.ndarray]:
        self.predicts += list(calls.items())
        return super().predict(calls)
