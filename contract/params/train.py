"""Params of the train stage: an EAGLE-3 drafter from an extraction."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from contract.params.common import DataParallelParams, HostPath, OutputPath

DEFAULT_SELECT_DEPTH = 5


class TrainParams(DataParallelParams):
    data: HostPath = Field(description="an extract stage's output folder")
    target: HostPath = Field(description="the target model folder (config, embeddings, final norm, lm_head)")
    output: OutputPath = Field(
        description="run folder: epoch_{n}/ checkpoints in SGLang's layout + training state"
    )
    trust_remote_code: bool = Field(
        False,
        description="let transformers run the target folder's own Python code (config.json auto_map) when "
        "its text model is not an architecture transformers ships; the worker host must allow it "
        "(EYAS_ALLOW_REMOTE_CODE). Off: such a target is refused with a clear error, never a prompt",
    )
    backend: Literal["eyas"] = Field("eyas", description="trainer implementation (speculators: later)")
    epochs: int = Field(1, ge=1, le=1000)
    ttt_steps: int = Field(7, ge=1, le=16, description="training-time-test unroll length")
    step_decay: float = Field(0.8, gt=0, le=1, description="loss weight of TTT step k is step_decay**k")
    batch_size: int = Field(
        1,
        ge=1,
        le=4096,
        description="samples per rank per optimizer step (padded to the longest); the global batch is "
        "batch_size x ranks",
    )
    max_len: int = Field(
        2048,
        ge=8,
        le=262_144,
        description="samples are cut to this many tokens; with pack, also the tokens a packed row holds",
    )
    pack: bool = Field(
        False,
        description="sequence packing: each of a step's batch_size rows holds several whole samples, up to "
        "max_len tokens, instead of one sample padded to the batch's longest; attention, rope positions, "
        "the TTT shifts and the loss stay inside each sample, so a sample trains as if alone. A step then "
        "holds more tokens and an epoch fewer steps. Off by default: on an H200 it gave 0.984x of unpacked "
        "tokens/s (docs/design/packing-off.md)",
    )
    lr: float = Field(1e-4, gt=0, le=1)
    warmup_ratio: float = Field(0.015, ge=0, le=1, description="warmup as a fraction of all steps")
    warmup_steps: int | None = Field(None, ge=0, description="overrides warmup_ratio")
    schedule: Literal["cosine", "linear", "constant"] = Field("cosine", description="decay after warmup")
    weight_decay: float = Field(0.0, ge=0, le=1)
    grad_clip: float = Field(0.5, gt=0, description="max global grad norm")
    draft_vocab_size: int = Field(32000, ge=1, le=1_000_000, description="d2t/t2d from token frequencies")
    init_lm_head: Literal["target", "random"] = Field(
        "target", description="start lm_head from the target's rows for the draft vocab, or at random"
    )
    # Both defaults are speculators'. On one 4,000-conversation SmolLM2 extraction they raised SGLang's accept
    # length at depth 5 from 1.89 to 2.22 (docs/design/default-training-recipe.md).
    train_lm_head: bool = Field(
        False,
        description="keep lm_head frozen at the target's rows for the draft vocab (the default, as "
        "speculators does; a SmolLM2 drafter then trains 5.1 M weights instead of 23.5 M), or train it; "
        "init_lm_head 'random' trains it unless told otherwise",
    )
    norm_output: bool = Field(
        True,
        description="each TTT step reads the previous step's normed output (the default, as speculators "
        "does) instead of the pre-norm one; written to config.json, which SGLang 0.5.12+ and eyas's eval "
        "honour. Set false for SGLang before 0.5.12, which feeds the pre-norm state (fix_keys' doctor "
        "refuses a norm_output draft for those releases)",
    )
    val_fraction: float = Field(0.05, ge=0, le=0.5, description="samples held out for validation")
    train_samples: int | None = Field(
        None,
        ge=1,
        description="train on only this many of the training samples (after the validation split; a seeded "
        "choice in which a smaller count's samples are among a larger one's), for curves of acceptance "
        "against data size; null: all",
    )
    held_out_data: HostPath | None = Field(
        None,
        description="an extract stage's output (same target and aux layers) made from prompts kept out of "
        "training, e.g. like the traffic the drafter will serve: validated after every epoch beside the "
        "split (held_out/... metrics); when given, the acceptance estimate and the best epoch come from it. "
        "A split of the training data shares its prompts' style and overstates acceptance on other prompts "
        "(on SmolLM2, self-prompted data: +28-36 % against SGLang on MT-Bench)",
    )
    resume: bool = Field(True, description="continue the run saved in output; false refuses a used output")
    dtype: Literal["bfloat16", "float32"] = Field(
        "bfloat16", description="compute dtype (autocast); master weights stay float32"
    )
    compile: bool | None = Field(
        None,
        description="torch.compile the drafter's TTT unroll (default: on for cuda runs of at least 1,200 "
        "steps per static graph it compiles, one per padded length, where it pays back its compiles; off for "
        "cpu); a compiler failure at any step falls back to eager with a warning",
    )
    attention: Literal["auto", "dense", "flex"] = Field(
        "auto", description="TTT attention kernel: auto = flex on cuda, dense on cpu"
    )
    keep: Literal["best", "last"] = Field(
        "best",
        description="the checkpoint the run hands on (artifact best_drafter, which a pipeline's fix_keys "
        "reads): the epoch with the highest acceptance estimate at select_depth (on held_out_data when "
        "given, else on the validation split), or the last",
    )
    select_depth: int | None = Field(
        None,
        ge=1,
        le=16,
        description="draft depth (SGLang's --speculative-num-steps) of the estimate that picks the best "
        "epoch (default: 5, or ttt_steps when that is smaller); at most ttt_steps",
    )
    seed: int = Field(0, ge=0)
    log_every: int = Field(1, ge=1, description="optimizer steps between metric reports")
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer steps (smoke runs)")
    state_every_s: float | None = Field(
        1800,
        ge=0,
        description="save the training state this often within an epoch (seconds; null: at epoch ends only), "
        "so a crash costs at most this much training",
    )
    loader_workers: int = Field(2, ge=0, le=64, description="DataLoader worker processes")

    @model_validator(mode="before")
    @classmethod
    def _random_head_is_trained(cls, data: Any) -> Any:
        # A random head left frozen would never learn: trained unless the request says otherwise.
        if isinstance(data, dict) and data.get("init_lm_head") == "random" and "train_lm_head" not in data:
            return {**data, "train_lm_head": True}
        return data

    @model_validator(mode="after")
    def _depth_within_unroll(self) -> TrainParams:
        # Past the unroll the drafter was never validated: there is no estimate to choose by.
        if self.select_depth is not None and self.select_depth > self.ttt_steps:
            raise ValueError(f"select_depth {self.select_depth} is past ttt_steps {self.ttt_steps}")
        if not self.train_lm_head and self.init_lm_head == "random":
            raise ValueError(
                "train_lm_head false keeps lm_head as it starts: that needs init_lm_head 'target'"
            )
        return self

    @property
    def choice_depth(self) -> int:
        return (
            self.select_depth if self.select_depth is not None else min(DEFAULT_SELECT_DEPTH, self.ttt_steps)
        )
