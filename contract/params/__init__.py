"""Typed parameters of every stage, one module per stage; `contract.stages` maps each kind to its model."""
