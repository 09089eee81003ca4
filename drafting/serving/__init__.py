"""Serving: render and check SGLang launches, run and watch the server, the reference engine, benchmarks.

Modules that render and check (findings, rules, render) import only the standard library and pydantic, so the
API can render a launch without a host. Those that decode (decoding, reference_engine) import torch.
"""
