"""The stage registry: kind → params model, the module that runs it, what it does. A new stage is one entry.

The API validates a job's params with `STAGES[kind].params` at submit time; the worker's stage process imports
`STAGES[kind].module` (in the drafting library) only when a job of that kind runs, and calls its
`run(ctx, params)`. GPU needs come from the params themselves (`params.gpus_needed()`), since they depend on
the values (a `train` on `cuda` holds GPUs, one on `cpu` none).
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.params.benchmark import BenchmarkParams
from contract.params.checkpoint import DoctorParams, FixKeysParams
from contract.params.common import StageParams
from contract.params.evaluate import EvalParams
from contract.params.extract import ExtractParams
from contract.params.generate import GenerateParams
from contract.params.gpu_check import GpuCheckParams
from contract.params.launch import LaunchParams
from contract.params.selftest import SelftestParams
from contract.params.train import TrainParams


@dataclass(frozen=True)
class StageSpec:
    kind: str
    params: type[StageParams]
    module: str  # imported by the stage process only: `run(ctx, params) -> result`
    description: str

    def parse(self, raw: object) -> StageParams:
        """Validated params; raises pydantic.ValidationError."""
        return self.params.model_validate(raw)


_SPECS = (
    StageSpec(
        "selftest", SelftestParams, "drafting.stages.selftest", "prints lines, sleeps, exits with a code"
    ),
    StageSpec(
        "gpu_check", GpuCheckParams, "drafting.stages.gpu_check", "NVML inventory and clean/dirty verdict"
    ),
    StageSpec("fix_keys", FixKeysParams, "drafting.stages.fix_keys", "convert a drafter to SGLang's layout"),
    StageSpec("doctor", DoctorParams, "drafting.stages.doctor", "check a drafter against SGLang's loader"),
    StageSpec(
        "generate", GenerateParams, "drafting.stages.generate", "a prompt set answered by the target"
    ),
    StageSpec(
        "extract", ExtractParams, "drafting.stages.extract", "hidden states of a target over conversations"
    ),
    StageSpec("train", TrainParams, "drafting.stages.train", "train an EAGLE-3 drafter"),
    StageSpec("launch", LaunchParams, "drafting.stages.launch", "start an SGLang (or reference) server"),
    StageSpec(
        "benchmark", BenchmarkParams, "drafting.stages.benchmark", "acceptance and throughput of a server"
    ),
    StageSpec("eval", EvalParams, "drafting.stages.evaluate", "offline acceptance of a drafter"),
)

STAGES: dict[str, StageSpec] = {spec.kind: spec for spec in _SPECS}


def parse_params(kind: str, raw: object) -> StageParams:
    """Validate raw params with the stage's model; raises KeyError or pydantic.ValidationError."""
    return STAGES[kind].parse(raw)
