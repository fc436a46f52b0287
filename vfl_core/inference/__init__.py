"""Predictions, their scores and metrics, per observed subset of parties."""
