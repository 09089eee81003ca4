"""Judging a drafter's outputs: offline acceptance, where speculative and plain outputs part and why, and the
load smoke test of a running server."""
