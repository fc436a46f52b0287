"""Checkpoints on disk and the run log."""
