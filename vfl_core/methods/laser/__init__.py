"""LASER-VFL (Valdeira, Wang, Chi, ICLR 2025) and its baselines as one method folder.

- `objective`: the LASER objective (task weights, task sampling, the sampled and the full loss);
- `specs`: the MethodSpec of LASER-VFL and of each baseline, with their task rules;
- `stale`: the `stale` baseline's memory of each training sample's last embedding.

Their party side is the Party's Embed/Fuse/Backward (vfl_core.training.party) and their round is
the engine's (vfl_core.training.engine); the registry (vfl_core.methods.registry) names them.
"""
