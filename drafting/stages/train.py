"""train: an EAGLE-3 drafter from an extraction, with eyas's own TTT trainer (SGLang-native output).

With several GPUs (or `ranks` on CPU) the stage runs itself as torchrun ranks (drafting/stages/_torchrun.py)
and each rank trains under DDP on its share of the batches; rank 0 alone reports, saves checkpoints and the
training state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from contract.params.train import TrainParams
from contract.reasons import TerminationReason
from drafting.context import StageCancelled, StageContext, StageError, out_of_memory, remote_code
from drafting.hostinfo import gpus
from drafting.ml import distributed
from drafting.ml.distributed import Ranks
from drafting.ml.drafter import Eagle3Drafter, save_drafter
from drafting.ml.objective import ACCEPT_DEPTHS
from drafting.ml.target_head import TargetHead, load_target_head
from drafting.ml.train_data import (
    Extraction,
    ExtractionMismatch,
    HiddenStateDataset,
    epoch_plan,
    open_extraction,
    open_held_out,
    run_steps,
    split_indices,
    training_subset,
)
from drafting.ml.train_loop import LoopPlan, ValidationSet, run_training
from drafting.ml.train_state import STATE_FILE, RunPosition, load_state, restore, save_state
from drafting.ml.trainer import (
    NonFiniteLoss,
    OptimSettings,
    StepOutOfMemory,
    StopRequested,
    Trainer,
    make_optimizer,
)
from drafting.ml.vocab import d2t_offsets, draft_token_ids
from drafting.stages._target import target_errors
from drafting.stages._torchrun import quiet_unless_main, run_ranks, world_size
from drafting.stages._train_record import record_epoch, train_result
from drafting.userfiles import Cap, read_user_json_object

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
# Batches are padded to a multiple of FlexAttention's block size on a GPU: a few distinct lengths, each
# compiled once as a static graph (trainer.py says why not dynamic shapes), no partial blocks.
CUDA_PAD_MULTIPLE = 128
# Static graphs compile once per padded length (trainer.py), so the stage asks this many steps per compile.
# On an H200 (the compiled train stage at SmolLM2's shape, beside a generate server): ~24 s a counted compile,
# and the compiled step took 0.66 of the eager one; at a real SmolLM2 step (0.099 s, batch 32) that pays
# back from ~720 steps a compile, or ~1,200 if the saving is the 20 % of the 8B-shaped bench.train_step
# (docs/design/compile-threshold.md).
COMPILE_MIN_STEPS = 1200
# Params that define the run: resuming with any of them changed cannot continue it exactly.
_RUN_DEFINING = (
    "epochs", "ttt_steps", "step_decay", "batch_size", "max_len", "lr", "warmup_ratio", "warmup_steps",
    "schedule", "weight_decay", "grad_clip", "draft_vocab_size", "init_lm_head", "train_lm_head",
    "norm_output", "val_fraction", "seed", "dtype",
)  # fmt: skip


@dataclass(frozen=True)
class _Inputs:
    data: Path
    target: Path
    output: Path
    target_config: dict[str, Any]
    device: torch.device
    dtype: torch.dtype


def run(ctx: StageContext, params: TrainParams) -> dict[str, Any]:
    world = world_size(ctx, params)
    if world > 1 and not distributed.launched_by_torchrun():
        return run_ranks(ctx, "train", params, world)
    # A rank stays in the group after returning: stage_main leaves it once the result is sent (the result
    # is tagged with the rank the group gives).
    ranks = distributed.join(params.device)
    try:
        return _train(ctx, params, ranks)
    except StopRequested:
        raise StageCancelled() from None


@dataclass
class _Run:
    """One training run's state, shared by its checkpoints: rank 0 alone writes them."""

    ctx: StageContext
    params: TrainParams
    ranks: Ranks
    inputs: _Inputs
    fingerprint: dict[str, Any]
    drafter: Eagle3Drafter
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    position: RunPosition

    def save_position(self, at: RunPosition) -> None:
        """The training state, to resume from."""
        if not self.ranks.is_main:
            return
        save_state(
            self.inputs.output,
            drafter=self.drafter,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            position=at,
            fingerprint=self.fingerprint,
        )

    def save_epoch(self, epoch: int, summary: dict[str, float]) -> Path:
        """An epoch's drafter checkpoint (an artifact), and its line in run.json (what the choice of the
        checkpoint to hand on reads, across resumes)."""
        folder = self.inputs.output / f"epoch_{epoch + 1}"
        if not self.ranks.is_main:
            return folder
        save_drafter(self.drafter, folder, target_config=self.inputs.target_config)
        meta = {"epoch": epoch + 1, "global_step": self.position.global_step, **summary}
        self.ctx.artifact("drafter", folder, meta)
        record_epoch(self.inputs.output, self.ctx.paths.describe_all(self.params.model_dump()), summary)
        return folder


def _train(ctx: StageContext, params: TrainParams, ranks: Ranks) -> dict[str, Any]:
    ctx = quiet_unless_main(ctx, ranks)
    inputs = _resolve(ctx, params, ranks)
    extraction, held_out, head = _open_inputs(inputs, params, remote_code(ctx, params.trust_remote_code))
    fingerprint = {
        "extraction": extraction.manifest["fingerprint"],
        **{name: getattr(params, name) for name in _RUN_DEFINING},
        "ranks": ranks.world,
        **({"pack": True} if params.pack else {}),  # absent when off: states saved before `pack` still resume
        **({"train_samples": params.train_samples} if params.train_samples is not None else {}),  # likewise
        # The held-out set changes no weight, but the best epoch is chosen by comparing every recorded
        # epoch's held_out/ estimate, across the jobs of a run: epochs scored on other prompts (or on none)
        # are not comparable, so a resume with another held-out extraction, or without it, is refused.
        # Absent without one: runs that use none (and states saved before this) keep their fingerprint.
        **({"held_out": held_out.manifest["fingerprint"]} if held_out else {}),
    }
    state = _previous_run(params, inputs.output, fingerprint)
    drafter = _build_drafter(params, inputs, extraction, head, state)
    train_rows, val_rows = split_indices(len(extraction.seq_lens), params.val_fraction, params.seed)
    train_rows = training_subset(train_rows, params.train_samples, params.seed)
    if not train_rows:
        raise StageError(
            "no training samples left after the validation split", reason=TerminationReason.DATA_MISMATCH
        )
    if params.train_samples is not None:
        ctx.log(f"training on {len(train_rows)} samples (train_samples {params.train_samples})")
    plan = _loop_plan(params, inputs, extraction, train_rows, val_rows, ranks, held_out)
    if held_out is not None:
        ctx.log(
            f"validating every epoch also on {len(held_out.seq_lens)} held-out samples from {held_out.folder}"
        )
    settings = _optim_settings(params, plan.total_steps)
    val_lens = [extraction.seq_lens[i] for i in val_rows] + list(held_out.seq_lens if held_out else [])
    graphs = compiled_graphs(
        extraction.seq_lens, train_rows, val_lens, max_len=params.max_len, pack=params.pack
    )
    compiled = should_compile(params, inputs.device, plan.total_steps, graphs)
    optimizer, scheduler = make_optimizer(drafter, settings, inputs.device)
    position = (
        restore(state, drafter=drafter, optimizer=optimizer, scheduler=scheduler) if state else RunPosition()
    )
    if state:
        ctx.log(f"resuming at epoch {position.epoch + 1}, step {position.global_step}")
    trainer = Trainer(
        drafter,
        head.to(inputs.device, inputs.dtype),
        optimizer=optimizer,
        scheduler=scheduler,
        settings=settings,
        ttt_steps=params.ttt_steps,
        step_decay=params.step_decay,
        attention=params.attention,
        compute_dtype=inputs.dtype,
        device=inputs.device,
        ranks=ranks,
        compile_drafter=compiled,
    )
    run = _Run(ctx, params, ranks, inputs, fingerprint, drafter, optimizer, scheduler, position)
    if inputs.device.type == "cuda":  # the peak reported is this run's, whatever ran before in the process
        torch.cuda.reset_peak_memory_stats(inputs.device)
    if inputs.device.type == "cuda" and ranks.is_main and (holders := gpus.memory_holders(ctx.gpus)):
        ctx.log(f"warning: {holders}: this run may run out of memory", stream="stderr")
    _fit(run, trainer, plan)
    if not ranks.is_main:
        return {"rank": ranks.rank}
    result = train_result(ctx, inputs.output, position, params, drafter, total_steps=plan.total_steps)
    held = len(held_out.seq_lens) if held_out is not None else None
    # requested: the compile param (null = the stage decides); fell_back: where a compiled run went eager.
    compile_record = {"requested": params.compile, "used": compiled, "fell_back": trainer.compile_fallback}
    samples = {"train": len(train_rows), "val": len(val_rows), "held_out": held}
    head_steps = trainer.argmax_cache.report()  # the full-vocab head runs in a sample's first step only
    peak = _peak_gpu_bytes(inputs.device)  # what the run needs beside others on the GPU
    return {
        **result, "samples": samples, "compile": compile_record, "target_head": head_steps,
        "peak_gpu_bytes": peak,
    }  # fmt: skip


def _peak_gpu_bytes(device: torch.device) -> int | None:
    """The most memory the run's tensors held on its GPU (torch's allocator: what speculators' driver
    reports too); None on the CPU."""
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


def _optim_settings(params: TrainParams, total_steps: int) -> OptimSettings:
    warmup = params.warmup_steps
    return OptimSettings(
        lr=params.lr,
        warmup_steps=warmup if warmup is not None else round(params.warmup_ratio * total_steps),
        total_steps=total_steps,
        schedule=params.schedule,
        weight_decay=params.weight_decay,
        grad_clip=params.grad_clip,
    )


def _fit(run: _Run, trainer: Trainer, plan: LoopPlan) -> None:
    """The training loop, its failures as the stage's errors."""
    try:
        run_training(
            trainer, plan, run.position, run.ctx, save_state=run.save_position, save_epoch=run.save_epoch
        )
    except NonFiniteLoss as exc:
        raise StageError(
            f"{exc}: lower lr, or check the extraction for non-finite states",
            reason=TerminationReason.NAN_LOSS,
            details={"step": exc.step},
        ) from None
    except StepOutOfMemory as exc:
        raise out_of_memory(str(exc), exc.batch_size, exc.seq_len, run.ctx.gpus) from None


def _resolve(ctx: StageContext, params: TrainParams, ranks: Ranks) -> _Inputs:
    target = Path(params.target)
    config_path = target / "config.json"
    if not config_path.exists():
        raise StageError(f"{target} has no config.json (expected a HF model folder)")
    if params.device == "cuda" and not torch.cuda.is_available():
        raise StageError("device is cuda but no CUDA device is visible", reason=TerminationReason.NO_GPU)
    output = ctx.output_folder(params.output, "train")
    return _Inputs(
        data=Path(params.data),
        target=target,
        output=output,
        target_config=read_user_json_object(config_path, Cap.CONFIG, "target config.json"),
        device=torch.device("cuda", ranks.local_rank) if params.device == "cuda" else torch.device("cpu"),
        dtype=DTYPES[params.dtype],
    )


def _open_inputs(
    inputs: _Inputs, params: TrainParams, trust_remote_code: bool
) -> tuple[Extraction, Extraction | None, TargetHead]:
    """The training extraction, the held-out one (held_out_data, checked against both), the target's head."""
    try:
        extraction = open_extraction(inputs.data, inputs.target_config)
        folder = params.held_out_data
        held_out = open_held_out(Path(folder), inputs.target_config, extraction) if folder else None
    except ExtractionMismatch as exc:
        raise StageError(str(exc), reason=TerminationReason.DATA_MISMATCH) from None
    with target_errors():
        return extraction, held_out, load_target_head(inputs.target, trust_remote_code=trust_remote_code)


def _previous_run(params: TrainParams, output: Path, fingerprint: dict[str, Any]) -> dict[str, Any] | None:
    """The saved state to resume from, after checking it belongs to this run."""
    used = (output / STATE_FILE).exists() or any(output.glob("epoch_*"))
    if not params.resume:
        if used:
            raise StageError(f"{output} already holds a training run: set resume, or choose a new output")
        return None
    state = load_state(output)
    if state is None:
        if used:
            raise StageError(
                f"{output} has checkpoints but no {STATE_FILE} to resume from: choose a new output"
            )
        return None
    if state["fingerprint"] != fingerprint:
        saved = state["fingerprint"]
        changed = sorted(k for k in fingerprint.keys() | saved.keys() if saved.get(k) != fingerprint.get(k))
        raise StageError(
            f"{output} holds a run with other settings ({', '.join(changed)}): it cannot continue exactly; "
            "choose a new output",
            reason=TerminationReason.DATA_MISMATCH,
            details={"changed": changed},
        )
    return state


def _build_drafter(
    params: TrainParams,
    inputs: _Inputs,
    extraction: Extraction,
    head: TargetHead,
    state: dict[str, Any] | None,
) -> Eagle3Drafter:
    """The drafter on the training device: fresh (vocab from token frequencies), or as saved (same vocab:
    rebuilding d2t on resume would silently misalign lm_head rows)."""
    torch.manual_seed(params.seed)  # the same seed gives the same initial drafter, run after run
    try:
        drafter = Eagle3Drafter.from_target_config(
            inputs.target_config,
            draft_vocab_size=params.draft_vocab_size,
            aux_layer_ids=extraction.aux_layers,
            norm_output=params.norm_output,
            aux_capture=extraction.aux_capture,
            sglang_version=extraction.sglang_version,
        )
    except ValueError as exc:
        raise StageError(str(exc), reason=TerminationReason.DATA_MISMATCH) from None
    drafter.set_target_embeddings(head.embed.float())
    if state is None:
        vocab = int(drafter.config["vocab_size"])
        draft_ids = draft_token_ids(extraction.token_freq, params.draft_vocab_size, vocab)
        drafter.set_vocab_mapping(d2t_offsets(draft_ids))
        if params.init_lm_head == "target":
            with torch.no_grad():
                drafter.lm_head.weight.copy_(head.lm_head[draft_ids].float())
    if not params.train_lm_head:  # the optimizer takes only what requires grad (trainer.make_optimizer)
        drafter.lm_head.weight.requires_grad_(False)
    drafter.to(inputs.device)
    drafter.embed_tokens.to(inputs.dtype)  # frozen: no float32 master copy needed
    return drafter


def should_compile(params: TrainParams, device: torch.device, total_steps: int, graphs: float) -> bool:
    """torch.compile pays back its compiles only over a long run: `graphs` of them, each worth
    COMPILE_MIN_STEPS steps of the 20-34 % it saves. A short run (a demo, a smoke test) trains sooner
    eagerly."""
    if params.compile is not None:
        return params.compile
    return device.type == "cuda" and total_steps >= COMPILE_MIN_STEPS * graphs


def compiled_graphs(
    seq_lens: Sequence[int],
    train_rows: Sequence[int],
    no_grad_lens: Sequence[int],
    *,
    max_len: int,
    pack: bool,
) -> float:
    """How many compiles a run costs: one per padded length the training batches take, half of one per
    length validation takes (no backward). Packed rows all have max_len: one length."""
    if pack:
        return 1.5

    def padded(lengths: Iterable[int]) -> set[int]:
        return {-(-min(n, max_len) // CUDA_PAD_MULTIPLE) * CUDA_PAD_MULTIPLE for n in lengths}

    return len(padded(seq_lens[i] for i in train_rows)) + 0.5 * len(padded(no_grad_lens))


def _loop_plan(
    params: TrainParams,
    inputs: _Inputs,
    extraction: Extraction,
    train_rows: list[int],
    val_rows: list[int],
    ranks: Ranks,
    held_out: Extraction | None,
) -> LoopPlan:
    pack_len = params.max_len if params.pack else None
    batching = {
        "batch_size": params.batch_size, "seed": params.seed, "rank": ranks.rank, "world": ranks.world,
    }  # fmt: skip
    batches = epoch_plan(train_rows, extraction.seq_lens, epoch=0, pack_len=pack_len, **batching)
    if not batches:
        raise StageError(
            f"{len(train_rows)} training samples make no full batch of {params.batch_size} for each of "
            f"{ranks.world} ranks",
            reason=TerminationReason.DATA_MISMATCH,
        )
    return LoopPlan(
        dataset=HiddenStateDataset(extraction, params.max_len),
        train_rows=train_rows,
        val_rows=val_rows,
        seq_lens=extraction.seq_lens,
        epochs=params.epochs,
        batch_size=params.batch_size,
        seed=params.seed,
        log_every=params.log_every,
        max_steps=params.max_steps,
        state_every_s=params.state_every_s,
        loader_workers=params.loader_workers,
        pad_multiple=CUDA_PAD_MULTIPLE if inputs.device.type == "cuda" else 1,
        total_steps=run_steps(params.epochs, train_rows, extraction.seq_lens, pack_len=pack_len, **batching),
        accept_depths=tuple(sorted({*ACCEPT_DEPTHS, params.choice_depth})),
        pack_len=pack_len,
        held_out=None if held_out is None else _validation_set(held_out, params.max_len),
    )


def _validation_set(held_out: Extraction, max_len: int) -> ValidationSet:
    """All of a held-out extraction's samples, validated after every epoch as `held_out/...`."""
    return ValidationSet(
        "held_out", HiddenStateDataset(held_out, max_len), list(range(len(held_out.seq_lens)))
    )
