"""Bodies of the pipelines API."""

from __future__ import annotations

import posixpath
import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from app.hosts.schemas import HOST_NAME_PATTERN
from app.jobs.schemas import JobRead
from contract.params.common import HostPath


class HeldOutSpec(BaseModel):
    """A validation set kept out of training: `prompts` the target answers as `generate` answers the training
    prompts (same engine and sampling), or `conversations` already answered (an earlier pipeline's
    held_out.jsonl, kept to compare runs on one set). `extract` turns them into hidden states, and `train`
    validates on that extraction every epoch and takes its acceptance estimate and best epoch from it."""

    model_config = ConfigDict(extra="forbid", strict=True)  # JSON's types as written

    prompts: HostPath | None = Field(
        None,
        description="JSONL prompt set (as generate's `prompts`) like the traffic the drafter will serve; "
        "kept out of training, and apart from the eval and benchmark prompts. Needs `generate`",
    )
    conversations: HostPath | None = Field(
        None,
        description="or JSONL conversations already answered by the target (an earlier pipeline's "
        "held_out.jsonl): extracted as they are, with `data` or `generate`",
    )
    limit: int | None = Field(None, ge=1, description="use at most this many usable records of `prompts`")
    serve: bool = Field(
        False,
        description="also serve the drafter on these prompts before the sweep (step serve_held_out: a "
        "benchmark job with the benchmark section's launch and chain depths, on the held-out conversations' "
        "prompts, ending at their end of turn); the acceptance report then sets train's estimate beside "
        "the engine's figure on the very prompts it was computed on",
    )
    max_new_tokens: int | None = Field(
        None,
        ge=1,
        le=32_768,
        description="serve_held_out's answer budget (default: generate's max_new_tokens, the budget the "
        "held-out answers were made with; needed with `conversations` and `data`)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> HeldOutSpec:
        if (self.prompts is None) == (self.conversations is None):
            raise ValueError(
                "give exactly one of held_out.prompts (answered by generate) and held_out.conversations "
                "(already answered)"
            )
        if self.conversations is not None and self.limit is not None:
            raise ValueError(
                "held_out.limit counts prompts to answer; held-out conversations are extracted whole "
                "(give a shorter file)"
            )
        return self


# Params the eagle3 template sets itself in each section's steps (templates.eagle3_plan), by section, with
# what sets them. Given in a spec or a retry they would be stored and never used (`train.output: /etc`), so
# they are refused by name; null is taken as leaving one out.
SET_BY_TEMPLATE: dict[str, dict[str, str]] = {
    "generate": {
        "target": "the pipeline's `target`",
        "output": "the pipeline (<run folder>/conversations.jsonl)",
    },
    "extract": {
        "target": "the pipeline's `target`",
        "data": "the pipeline's `data`, or the generate step's output",
        "output": "the pipeline (<run folder>/hidden_states)",
    },
    "train": {
        "target": "the pipeline's `target`",
        "data": "the extract step's hidden states",
        "output": "the pipeline (<run folder>/train)",
    },
    "fix_keys": {
        "source": "the train step's best checkpoint",
        "dest": "the pipeline (<run folder>/sglang_draft)",
    },
    "eval": {"model": "the pipeline's `target`", "draft": "the fix_keys step's checkpoint"},
    "benchmark": {"mode": "the pipeline (a sweep)"},
    "benchmark.launch": {"model": "the pipeline's `target`", "draft": "the fix_keys step's checkpoint"},
}


def _refuse_template_fields(section: str, params: Any) -> Any:
    """A section's params, or a 422 naming the first param in it that the template sets itself."""
    if not isinstance(params, dict):
        return params
    owned = SET_BY_TEMPLATE.get(section, {})
    for key, value in params.items():
        if key in owned and value is not None:
            raise PydanticCustomError(
                "set_by_template",
                "{field} is set by {setter}; leave it out",
                {"field": f"{section}.{key}", "setter": owned[key]},
            )
    if section == "benchmark":
        _refuse_template_fields("benchmark.launch", params.get("launch"))
    return params


class Eagle3PipelineCreate(BaseModel):
    """Everything from hidden states to the benchmark table, as one request."""

    model_config = ConfigDict(extra="forbid", strict=True)  # JSON's types as written

    template: Literal["eagle3"] = "eagle3"
    target: HostPath = Field(description="target model folder (HF layout)")
    data: HostPath | None = Field(
        None, description="JSONL of conversations; or leave it out and give `generate` to make them"
    )
    generate: dict[str, Any] | None = Field(
        None,
        description="regenerate the training conversations with the target first (generate params besides "
        "target/output: prompts, self_prompts, engine…); its output is the data extract reads",
    )
    held_out: HeldOutSpec | None = Field(
        None,
        description="with `generate`: also answer these prompts with the target and extract them "
        "(generate_held_out, extract_held_out); train validates on them (its `held_out_data`) and takes its "
        "acceptance estimate and best epoch from them rather than from a split of the training data",
    )
    workdir: HostPath = Field(
        description="outputs go to <workdir>/<pipeline id>/"
        "{conversations.jsonl,hidden_states,held_out.jsonl,held_out_states,train,sglang_draft}"
    )
    host: str | None = Field(None, pattern=HOST_NAME_PATTERN, description="GPU host for every step")
    extract: dict[str, Any] = Field(
        default_factory=dict, description="extract params besides target/data/output"
    )
    train: dict[str, Any] = Field(default_factory=dict, description="train params besides data/target/output")
    fix_keys: dict[str, Any] = Field(default_factory=dict, description="e.g. sglang_version")
    gpu_check: dict[str, Any] = Field(default_factory=dict)
    eval: dict[str, Any] | None = Field(default_factory=dict, description="offline acceptance; null skips it")
    benchmark: dict[str, Any] = Field(
        default_factory=dict, description="sweep params (depths default 16,10,5; launch: engine, tp_size…)"
    )

    @field_validator("generate", "extract", "train", "fix_keys", "eval", "benchmark")
    @classmethod
    def _no_template_fields(cls, params: Any, info: ValidationInfo) -> Any:
        return _refuse_template_fields(str(info.field_name), params)

    @model_validator(mode="after")
    def _one_data_source(self) -> Eagle3PipelineCreate:
        if (self.data is None) == (self.generate is None):
            raise ValueError("give exactly one of `data` (conversations) and `generate` (make them first)")
        if self.generate is not None:
            _refuse_shared_prompts(self)
        if self.held_out is not None:
            _check_held_out(self)
        return self


def _refuse_shared_prompts(spec: Eagle3PipelineCreate) -> None:
    """Evaluation prompts must be held out from training prompts: the same file or named set in `generate`
    and in `eval`/`benchmark` is refused here (overlap inside different files is caught by generate's
    `holdout_prompts`, which the template fills with the eval and benchmark prompt sets)."""
    assert spec.generate is not None
    trained = spec.generate.get("prompts")
    for step, params in (("eval", spec.eval or {}), ("benchmark", spec.benchmark)):
        held_out = params.get("prompts")
        if trained is not None and held_out is not None and _same_source(trained, held_out):
            raise ValueError(
                f"{step}.prompts is also generate.prompts ({held_out!r}): evaluation prompts must be held "
                "out from the prompts the drafter is trained on"
            )


def _check_held_out(spec: Eagle3PipelineCreate) -> None:
    """Held-out prompts are answered with generate's target, engine and sampling, so they need `generate`;
    held-out conversations need neither. Either must be neither the training source (it validates training)
    nor the eval/benchmark prompts (it picks the checkpoint they then judge). Overlaps inside different
    files are dropped by the generate steps' `holdout_prompts` (the template fills them)."""
    held_out = spec.held_out
    assert held_out is not None
    if held_out.prompts is not None and spec.generate is None:
        raise ValueError(
            "held_out.prompts needs `generate`: they are answered by the target with generate's engine and "
            "sampling settings (with `data`, give conversations the target already answered as "
            "held_out.conversations)"
        )
    if spec.train.get("held_out_data") is not None:
        raise ValueError(
            "give held_out or train.held_out_data, not both: held_out makes train's held_out_data"
        )
    if held_out.serve and held_out.max_new_tokens is None and spec.generate is None:
        raise ValueError(
            "held_out.serve with held-out conversations and `data` needs held_out.max_new_tokens: the "
            "answer budget the conversations were made with"
        )
    field, source = (
        ("prompts", held_out.prompts)
        if held_out.prompts is not None
        else ("conversations", held_out.conversations)
    )
    others = (
        ("generate.prompts", (spec.generate or {}).get("prompts")),
        ("data", spec.data),
        ("eval.prompts", (spec.eval or {}).get("prompts")),
        ("benchmark.prompts", spec.benchmark.get("prompts")),
    )
    for step, other in others:
        if _same_source(source, other):
            why = (
                "validation prompts must be kept out of the prompts the drafter is trained on"
                if step in ("generate.prompts", "data")
                else "evaluation prompts must stay apart from the prompts that pick the checkpoint"
            )
            raise ValueError(f"held_out.{field} is also {step} ({source!r}): {why}")


def _same_source(a: Any, b: Any) -> bool:
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    return posixpath.normpath(a) == posixpath.normpath(b)


# Spec sections a retry may change; each feeds the steps named (generate's settings answer the held-out
# prompts too, extract's extract them).
SECTION_STEPS: dict[str, tuple[str, ...]] = {
    "generate": ("generate", "generate_held_out"),
    "extract": ("extract", "extract_held_out"),
    "train": ("train",),
    "fix_keys": ("fix_keys",),
    "gpu_check": ("gpu_check",),
    "eval": ("eval",),
    "benchmark": ("serve_held_out", "benchmark"),
}
Section = Literal["generate", "extract", "train", "fix_keys", "gpu_check", "eval", "benchmark"]


class PipelineRetry(BaseModel):
    """Run a pipeline's steps again: from the failed step (the default), or from an earlier one, with some
    step params changed. Each section's keys replace the spec's (a null value sets null: the param's own
    default), the whole spec is validated again, and the changed spec is the pipeline's from then on."""

    model_config = ConfigDict(extra="forbid", strict=True)  # JSON's types as written

    from_step: str | None = Field(
        None,
        max_length=32,
        description="the first step to run again (default: the failed one); the steps before it keep their "
        "results. A pipeline that succeeded reruns only from a step named here",
    )
    params: dict[Section, dict[str, Any]] = Field(
        default_factory=dict,
        description='step params to change, by spec section: {"train": {"compile": false}}; a section '
        "must feed only steps this retry runs. Changed steps run in a fresh folder, <workdir>/<id>/retry-<n>",
    )


class PipelineRead(BaseModel):
    id: uuid.UUID
    template: str
    state: str
    host: str | None
    created_at: datetime
    retries: int
    spec: dict[str, Any]
    run_root: str | None = Field(
        description="the folder the steps write to (a retry that changed params moves it)"
    )
    failed_step: str | None
    jobs: list[JobRead]
    # acceptance by depth: training's estimate, eval's figure and the served one, with errors (acceptance.py)
    acceptance: dict[str, Any] | None = None


class PipelinePage(BaseModel):
    items: list[PipelineRead]
    next_cursor: str | None
