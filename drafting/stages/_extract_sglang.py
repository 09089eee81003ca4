"""extract's sglang backend, the stage side.

Before any rank starts, the stage checks the host: the SGLang release whose in-process API the capture calls,
and CUDA GPUs for the whole tensor-parallel group. It then runs itself as torchrun ranks, one per GPU of the
group, a group of one included, so tp_size 1 and tp_size 8 take the same path. Every rank runs every batch
(each holds a slice of every layer, and the forward is collective); rank 0 alone writes, in the HF backend's
layout, and agrees with the others at each batch on whether to stop.
"""

from __future__ import annotations

from pathlib import Path

import torch

from contract.params.extract import ExtractParams
from contract.reasons import TerminationReason
from drafting.context import StageCancelled, StageContext, StageError, out_of_memory
from drafting.ml import distributed
from drafting.ml._writer import AsyncWriter
from drafting.ml.distributed import Ranks
from drafting.ml.extraction import BatchOutOfMemory, PendingSample
from drafting.ml.sglang_capture import CAPTURE_RELEASE, SGLangTarget, TargetSpec
from drafting.ml.sglang_extraction import BatchLimits, CaptureRefused, extract_packed, pack_batches, too_long
from drafting.serving.launch.sglang_parser import installed_sglang_version
from drafting.sglang_facts import parse_version
from drafting.stages._extract_writing import ExtractProgress, close_writer


def check_host(params: ExtractParams, world: int) -> None:
    """Refuse, with what to do about it, a host where the sglang backend cannot run."""
    problem = host_problem(installed_sglang_version(), torch.cuda.device_count(), params.tp_size, world)
    if problem is not None:
        raise problem


def host_problem(installed: str | None, cuda_devices: int, tp_size: int, world: int) -> StageError | None:
    """Why this host cannot run the sglang backend at tp_size over `world` GPUs (None when it can)."""
    if world != tp_size:
        return StageError(
            f"tp_size is {tp_size} but the job holds {world} GPU(s): backend sglang splits the target over "
            "exactly tp_size GPUs"
        )
    problems = []
    if cuda_devices < tp_size:
        problems.append(
            f"SGLang's model classes run on CUDA GPUs and tp_size {tp_size} needs {tp_size}, "
            f"this host shows {cuda_devices}"
        )
    if installed is None:
        problems.append(f"sglang is not installed here (install sglang=={CAPTURE_RELEASE})")
    elif not _same_release(installed, CAPTURE_RELEASE):
        problems.append(
            f"sglang {installed} is installed, but the capture calls SGLang {CAPTURE_RELEASE}'s in-process "
            f"API (ModelRunner, ScheduleBatch), which changes between releases (install "
            f"sglang=={CAPTURE_RELEASE})"
        )
    if not problems:
        return None
    return StageError(
        f"backend sglang cannot run on this host: {'; '.join(problems)}. Or extract with backend hf",
        reason=TerminationReason.NO_GPU if cuda_devices < tp_size else TerminationReason.PREFLIGHT_FAILED,
        details={"sglang": installed, "cuda_devices": cuda_devices, "supported_sglang": CAPTURE_RELEASE},
    )


def _same_release(installed: str, supported: str) -> bool:
    try:
        return parse_version(installed) == parse_version(supported)
    except ValueError:
        return False


def extract_with_sglang(
    ctx: StageContext,
    params: ExtractParams,
    *,
    aux_layers: list[int],
    sglang_aux_ids: list[int],
    dtype: torch.dtype,
    ranks: Ranks,
    pending: list[PendingSample],
    progress: ExtractProgress,
) -> None:
    """This rank's part of the extraction: all of `pending`, written by rank 0."""
    ctx.log(
        f"loading the target {params.target} in SGLang {CAPTURE_RELEASE} ({params.dtype}, tensor parallel "
        f"{ranks.world}, eagle_aux_hidden_state_layer_ids {sglang_aux_ids})"
    )
    spec = TargetSpec(
        folder=Path(params.target),
        dtype=params.dtype,
        sglang_aux_ids=sglang_aux_ids,
        aux_layers=aux_layers,
        tp_size=ranks.world,
        tp_rank=ranks.rank,
        gpu_id=ranks.local_rank,
        attention_backend=params.attention_backend,
        mem_fraction_static=params.mem_fraction_static,
    )
    try:
        target = SGLangTarget(spec)
    except CaptureRefused as exc:
        raise StageError(str(exc), reason=TerminationReason.DATA_MISMATCH) from None
    device = torch.device("cuda", ranks.local_rank)
    writer = None
    try:
        batches = _batches(params, pending, target.limits())
        if ranks.is_main:
            writer = AsyncWriter(
                Path(params.output),
                threads=params.writer_threads,
                depth=params.queue_depth,
                durable=params.durable_writes,
            )
        extract_packed(
            target,
            batches,
            writer=writer,
            device=device,
            dtype=dtype,
            check_cancelled=lambda: _agree_on_cancel(ctx, ranks, device),
            on_written=progress.update,
        )
    except BatchOutOfMemory as exc:
        raise out_of_memory(str(exc), exc.batch_size, exc.seq_len, ctx.gpus) from None
    except CaptureRefused as exc:
        raise StageError(str(exc), reason=TerminationReason.DATA_MISMATCH) from None
    finally:
        if writer is not None:
            close_writer(writer, progress)
        target.close()
    progress.emit(force=True)


def _batches(
    params: ExtractParams, pending: list[PendingSample], limits: BatchLimits
) -> list[list[PendingSample]]:
    longer = too_long(pending, limits)
    if longer:
        longest = max(len(sample.input_ids) for sample in longer)
        raise StageError(
            f"{len(longer)} sample(s) are longer than the {limits.max_sample_tokens} tokens SGLang can hold "
            f"for this target (its KV cache and context length), the longest {longest}: lower max_len, or "
            "raise mem_fraction_static or tp_size",
            reason=TerminationReason.OUT_OF_MEMORY,
            details={"max_sample_tokens": limits.max_sample_tokens, "longest": longest},
        )
    per_forward = min(params.batch_size, limits.max_samples)
    return pack_batches(pending, BatchLimits(per_forward, limits.max_tokens, limits.max_sample_tokens))


def _agree_on_cancel(ctx: StageContext, ranks: Ranks, device: torch.device) -> None:
    """Stop together: a rank that left alone would leave the others waiting in the next forward's
    all-reduce."""
    asked = torch.tensor([1.0 if ctx.cancel_requested() else 0.0], device=device)
    if distributed.max_across(ranks, asked).item() > 0:
        raise StageCancelled()
