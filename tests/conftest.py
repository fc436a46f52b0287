"""Shared test settings."""

import torch

# One intra-op thread: the machine has two cores shared with the federation processes the slow
# tests start, and a fixed thread count keeps float reductions identical across runs.
torch.set_num_threads(1)
