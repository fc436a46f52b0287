"""`laser-concat`, a method for one ablation (issue 27, benchmarks.tabular.report), not the
paper's and not built in: LASER-VFL's objective, subset choice and heads, with each head on the
concatenation of all K embeddings, zeros where a block is outside the subset (the fusion the
split-learning baselines use), instead of their mean. Importing this module registers it
(vfl_core.methods.registry.register); not servable from bundles (vfl_core.serving.bundle).
"""

from __future__ import annotations

from dataclasses import replace

from vfl_core.methods.registry import REGISTRY, register

NAME = "laser-concat"
LASER_CONCAT = register(
    replace(REGISTRY["laser"], name=NAME, display_name="LASER-VFL (concatenation)", fusion="concat")
)
