"""The stage registry: kind → params model, the module that runs it, what it does. A new stage is one entry.

The API validates a job's params with `STAGES[kind].params` at submit time; the worker's stage process imports
`STAGES[kind].module` (in the drafting library) only when a job of that kind runs, and calls its
`run(ctx, params)`. GPU needs come from the params themselves (`params.gpus_needed()`), since they depend on
the values (a `train` on `cuda` holds GPUs, one on `cpu` none).

Each params model is named by its dotted path and imported on first use: a stage process needs its own kind's
model only; importing all of them (pydantic building each model) cost ~40 ms per stage process here, on top
of pydantic itself, and every stage added more.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contract.params.common import StageParams


@dataclass(frozen=True)
class StageSpec:
    kind: str
    params_name: str  # "package.module.Model", imported on first use
    module: str  # imported by the stage process only: `run(ctx, params) -> result`
    description: str

    @property
    def params(self) -> type[StageParams]:
        """The params model (its module is imported now if it was not already)."""
        module, _, name = self.params_name.rpartition(".")
        model: type[StageParams] = getattr(importlib.import_module(module), name)
        return model

    def parse(self, raw: object) -> StageParams:
        """Validated params; raises pydantic.ValidationError."""
        return self.params.model_validate(raw)


_SPECS = (
    StageSpec(
        "selftest",
        "contract.params.selftest.SelftestParams",
        "drafting.stages.selftest",
        "prints lines, sleeps, exits with a code",
    ),
    StageSpec(
        "gpu_check",
        "contract.params.gpu_check.GpuCheckParams",
        "drafting.stages.gpu_check",
        "NVML inventory and clean/dirty verdict",
    ),
    StageSpec(
        "fix_keys",
        "contract.params.checkpoint.FixKeysParams",
        "drafting.stages.fix_keys",
        "convert a drafter to SGLang's layout",
    ),
    StageSpec(
        "doctor",
        "contract.params.checkpoint.DoctorParams",
        "drafting.stages.doctor",
        "check a drafter against SGLang's loader",
    ),
    StageSpec(
        "generate",
        "contract.params.generate.GenerateParams",
        "drafting.stages.generate",
        "a prompt set answered by the target",
    ),
    StageSpec(
        "extract",
        "contract.params.extract.ExtractParams",
        "drafting.stages.extract",
        "hidden states of a target over conversations",
    ),
    StageSpec(
        "train", "contract.params.train.TrainParams", "drafting.stages.train", "train an EAGLE-3 drafter"
    ),
    StageSpec(
        "launch",
        "contract.params.launch.LaunchParams",
        "drafting.stages.launch",
        "start an SGLang (or reference) server",
    ),
    StageSpec(
        "benchmark",
        "contract.params.benchmark.BenchmarkParams",
        "drafting.stages.benchmark",
        "acceptance and throughput of a server",
    ),
    StageSpec(
        "eval",
        "contract.params.evaluate.EvalParams",
        "drafting.stages.evaluate",
        "offline acceptance of a drafter",
    ),
)

STAGES: dict[str, StageSpec] = {spec.kind: spec for spec in _SPECS}


def parse_params(kind: str, raw: object) -> StageParams:
    """Validate raw params with the stage's model; raises KeyError or pydantic.ValidationError."""
    return STAGES[kind].parse(raw)
