"""Typed parameters of every stage: the contract between the API and the workers.

These modules import pydantic and the standard library only, so the API can validate a job's params at
submit time without importing any worker runtime (Celery tasks, torch, the process runner). This package is
the single place `app` may import from `workers` (enforced by tests/test_layering.py).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from pydantic import BaseModel

from contract.params.common import StageParams


@dataclass(frozen=True)
class StageSpec:
    """What the control plane needs to know about a stage before it runs."""

    kind: str
    params_path: str  # "module:Class"
    description: str

    def params_model(self) -> type[StageParams]:
        module_name, _, class_name = self.params_path.partition(":")
        model = getattr(importlib.import_module(module_name), class_name)
        assert issubclass(model, StageParams)
        return model


_SPECS = [
    StageSpec(
        "selftest", "contract.params.selftest:SelftestParams", "prints lines, sleeps, exits with a code"
    ),
    StageSpec(
        "gpu_check", "contract.params.gpu_check:GpuCheckParams", "NVML inventory and clean/dirty verdict"
    ),
    StageSpec("fix_keys", "contract.params.checkpoint:FixKeysParams", "convert a drafter to SGLang's layout"),
    StageSpec("doctor", "contract.params.checkpoint:DoctorParams", "check a drafter against SGLang's loader"),
    StageSpec(
        "extract", "contract.params.extract:ExtractParams", "hidden states of a target over conversations"
    ),
    StageSpec("train", "contract.params.train:TrainParams", "train an EAGLE-3 drafter"),
    StageSpec("launch", "contract.params.launch:LaunchParams", "start an SGLang (or reference) server"),
    StageSpec(
        "benchmark", "contract.params.benchmark:BenchmarkParams", "acceptance and throughput of a server"
    ),
    StageSpec("eval", "contract.params.evaluate:EvalParams", "offline acceptance of a drafter"),
]

STAGE_SPECS: dict[str, StageSpec] = {spec.kind: spec for spec in _SPECS}


def available_kinds() -> list[str]:
    """Kinds whose params module exists in this build."""
    kinds = []
    for kind, spec in STAGE_SPECS.items():
        try:
            spec.params_model()
        except (ImportError, AttributeError):
            continue
        kinds.append(kind)
    return kinds


def parse_params(kind: str, raw: dict[str, object]) -> BaseModel:
    """Validate raw params with the stage's model; raises KeyError or pydantic.ValidationError."""
    return STAGE_SPECS[kind].params_model().model_validate(raw)
