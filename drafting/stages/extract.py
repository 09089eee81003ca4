"""extract: a target's hidden states over conversations, in speculators' offline layout (resumable).

With several GPUs (or `ranks` on CPU) the stage runs itself as torchrun ranks: rank 0 tokenizes and checks
the disk, every rank extracts its share of the pending samples (dealt by length, so the shares weigh the
same), and rank 0 finishes the manifest once all have written theirs. With backend sglang the ranks are one
tensor-parallel group running the target in SGLang's own classes (`_extract_sglang.py`): each runs every
sample, rank 0 writes.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from contract.params.extract import ExtractParams
from contract.reasons import TerminationReason
from drafting.context import StageContext, StageError, out_of_memory, remote_code
from drafting.ml import distributed, hidden_store
from drafting.ml._config import check_aux_layers, default_aux_layers, serving_capture, text_config
from drafting.ml._dataset import (
    file_sha256,
    fingerprint,
    read_dataset_rows,
    tokenizer_sha256,
    write_dataset,
    write_token_freq,
)
from drafting.ml._writer import AsyncWriter
from drafting.ml.capture import extraction_indices
from drafting.ml.conversations import tokenize_file
from drafting.ml.distributed import Ranks
from drafting.ml.extraction import (
    BatchOutOfMemory,
    PendingSample,
    extract_batches,
    length_sorted_batches,
    load_target_model,
    pending_samples,
    required_bytes,
)
from drafting.ml.text_model import load_tokenizer, read_target_config, text_model_spec
from drafting.outputs import MARKER
from drafting.stages._extract_sglang import check_host, extract_with_sglang
from drafting.stages._extract_writing import ExtractProgress, RunTotals, close_writer
from drafting.stages._target import target_errors
from drafting.stages._torchrun import quiet_unless_main, run_ranks, world_size
from drafting.support_matrix import CaptureKind
from drafting.userfiles import Cap, check_model_folder, check_regular

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass(frozen=True)
class _Inputs:
    target: Path
    data: Path
    output: Path
    tokenizer: Path
    target_config: dict[str, Any]
    aux_layers: list[int]
    dtype: torch.dtype
    trust_remote_code: bool
    # what the serving class captures at aux_layers, the ids the draft will carry, and that said in words
    aux_capture: CaptureKind = CaptureKind.RESIDUAL_STREAM
    sglang_ids: tuple[int, ...] = ()
    serving_note: str = ""

    @property
    def hidden_size(self) -> int:
        return int(text_config(self.target_config)["hidden_size"])

    @property
    def num_layers(self) -> int:
        return int(text_config(self.target_config)["num_hidden_layers"])


def run(ctx: StageContext, params: ExtractParams) -> dict[str, Any]:
    world = world_size(ctx, params)
    if params.backend == "sglang" and not distributed.launched_by_torchrun():
        check_host(params, world)
        return run_ranks(ctx, "extract", params, world)
    if world > 1 and not distributed.launched_by_torchrun():
        return run_ranks(ctx, "extract", params, world)
    ranks = distributed.join(params.device)
    ctx = quiet_unless_main(ctx, ranks)
    inputs = _resolve(ctx, params)
    device = _device(params, ranks)
    manifest, rows, pending = _plan(ctx, params, inputs, ranks)
    # Data-parallel ranks (hf) take a share each; tensor-parallel ranks (sglang) all run every sample.
    mine = pending if params.backend == "sglang" else pending[ranks.rank :: ranks.world]
    progress = ExtractProgress(ctx, rows, pending, share=len(mine) / max(len(pending), 1))
    if mine and params.backend == "sglang":
        ids = manifest["sglang_aux_layer_ids"]  # what the draft config will carry
        extract_with_sglang(
            ctx,
            params,
            aux_layers=inputs.aux_layers,
            sglang_aux_ids=ids,
            dtype=inputs.dtype,
            ranks=ranks,
            pending=mine,
            progress=progress,
        )
    elif mine:
        _extract(ctx, params, inputs, device, mine, progress)
    written = _written_by_all(ranks, device, progress)
    if not ranks.is_main:
        return {"rank": ranks.rank}
    return _finish(ctx, inputs, manifest, rows, written, progress.tokens_per_s(written))


def _plan(
    ctx: StageContext, params: ExtractParams, inputs: _Inputs, ranks: Ranks
) -> tuple[dict[str, Any], list[list[int]], list[PendingSample]]:
    """(manifest, token rows, samples still to extract, longest first). Rank 0 tokenizes, clears partial
    files, finds what is pending and checks the disk before any rank starts; the others then read the rows
    it wrote and take its list of pending samples (their own look at the files could see rank 0's first
    new ones)."""
    pending_ids: list[int] | None = None
    if ranks.is_main:
        manifest, rows = _prepare_rows(ctx, params, inputs)
        stale = hidden_store.remove_stale_temporaries(inputs.output)
        pending = pending_samples(inputs.output, rows, inputs.hidden_size)
        ctx.log(
            f"{len(rows) - len(pending)}/{len(rows)} samples already extracted; {stale} partial files removed"
        )
        need = required_bytes(pending, inputs.hidden_size, inputs.dtype)
        _check_disk(ctx, params, inputs.output, need)
        manifest.update(status="extracting", estimated_bytes=need)
        hidden_store.write_manifest(inputs.output, manifest)
        pending_ids = [sample.index for sample in pending]
    pending_ids = distributed.from_main(ranks, pending_ids)
    if not ranks.is_main:
        manifest = hidden_store.read_manifest(inputs.output) or {}
        rows = read_dataset_rows(inputs.output)[0]
        pending = [PendingSample(i, rows[i]) for i in pending_ids]
    return manifest, rows, sorted(pending, key=lambda s: (-len(s.input_ids), s.index))


def _written_by_all(ranks: Ranks, device: torch.device, progress: ExtractProgress) -> RunTotals:
    """What every rank wrote in this run (the sum is also the point where rank 0 knows all are done)."""
    mine = [progress.samples_written, progress.tokens_written, progress.bytes_written]
    total = distributed.sum_across(ranks, torch.tensor(mine, dtype=torch.float64, device=device))
    samples, tokens, size = (int(v) for v in total.tolist())
    return RunTotals(samples, tokens, size)


def _resolve(ctx: StageContext, params: ExtractParams) -> _Inputs:
    target = Path(params.target)
    tokenizer = Path(params.tokenizer) if params.tokenizer else target
    # Every file transformers will read, and the data, up front: a FIFO among them fails now, not at timeout.
    check_model_folder(target, "target model folder")
    if tokenizer != target:
        check_model_folder(tokenizer, "tokenizer folder")
    data = Path(params.data)
    check_regular(data, Cap.DATASET, "conversation data")
    trust = remote_code(ctx, params.trust_remote_code)
    with target_errors():  # before any work: a target eyas cannot build fails now, not after tokenizing
        target_config = read_target_config(target)
        text_model_spec(target, trust_remote_code=trust)
    num_layers = int(text_config(target_config)["num_hidden_layers"])
    try:
        aux = check_aux_layers(params.aux_layers or default_aux_layers(num_layers), num_layers)
        capture, ids, note = serving_capture(target_config, aux, params.sglang_version)
    except ValueError as exc:
        raise StageError(str(exc), reason=TerminationReason.DATA_MISMATCH) from None
    output = ctx.output_folder(params.output, "extract")
    (output / hidden_store.HIDDEN_DIR).mkdir(exist_ok=True)
    return _Inputs(
        target=target,
        data=data,
        output=output,
        tokenizer=tokenizer,
        target_config=target_config,
        aux_layers=aux,
        dtype=DTYPES[params.dtype],
        trust_remote_code=trust,
        aux_capture=capture,
        sglang_ids=tuple(ids),
        serving_note=note,
    )


def _device(params: ExtractParams, ranks: Ranks) -> torch.device:
    if params.device == "cuda" and not torch.cuda.is_available():
        raise StageError("device is cuda but no CUDA device is visible", reason=TerminationReason.NO_GPU)
    return torch.device("cuda", ranks.local_rank) if params.device == "cuda" else torch.device("cpu")


def _fingerprint_inputs(params: ExtractParams, inputs: _Inputs) -> dict[str, Any]:
    return {
        "data_sha256": file_sha256(inputs.data, Cap.DATASET, "conversation data"),
        "tokenizer_sha256": tokenizer_sha256(inputs.tokenizer),
        "target_config": text_config(inputs.target_config),
        "aux_layers": inputs.aux_layers,
        "aux_capture": inputs.aux_capture.value,
        "dtype": params.dtype,
        "max_len": params.max_len,
        "overlong": params.overlong,
        "limit": params.limit,
        # States of two engines must not mix in one folder; an hf extraction's key stays what it was.
        **({"backend": params.backend} if params.backend != "hf" else {}),
    }


def _prepare_rows(
    ctx: StageContext, params: ExtractParams, inputs: _Inputs
) -> tuple[dict[str, Any], list[list[int]]]:
    """Tokenize (or, when resuming the same inputs, reuse the saved dataset) and return the manifest."""
    key_inputs = _fingerprint_inputs(params, inputs)
    key = fingerprint(key_inputs)
    existing = hidden_store.read_manifest(inputs.output)
    if existing is not None and existing.get("fingerprint") != key:
        raise StageError(
            f"{inputs.output} already holds an extraction of other inputs (data, tokenizer, target or "
            "params differ): choose a new output folder or delete that one",
            reason=TerminationReason.DATA_MISMATCH,
            details={"existing": existing.get("inputs"), "requested": key_inputs},
        )
    if existing is not None and existing.get("status") != "tokenizing":
        ctx.log(f"resuming the extraction in {inputs.output}")
        return existing, read_dataset_rows(inputs.output)[0]
    ours = (hidden_store.HIDDEN_DIR, MARKER)
    if existing is None and any(p.name not in ours for p in inputs.output.iterdir()):
        raise StageError(f"{inputs.output} is not empty and holds no eyas extraction")
    manifest = ctx.paths.describe_all(_new_manifest(params, inputs, key, key_inputs))
    hidden_store.write_manifest(inputs.output, manifest)
    return manifest, _tokenize(ctx, params, inputs, manifest)


def _tokenize(
    ctx: StageContext, params: ExtractParams, inputs: _Inputs, manifest: dict[str, Any]
) -> list[list[int]]:
    with target_errors():
        tokenizer = load_tokenizer(inputs.tokenizer, trust_remote_code=inputs.trust_remote_code)
    if not getattr(tokenizer, "chat_template", None):
        raise StageError(f"the tokenizer in {inputs.tokenizer} has no chat template")
    ctx.progress(0.0, "tokenizing")
    samples, summary = tokenize_file(
        inputs.data, tokenizer, max_len=params.max_len, overlong=params.overlong, limit=params.limit
    )
    ctx.log(f"tokenized: {json.dumps(summary.as_dict())}")
    if not samples:
        raise StageError(
            f"no usable conversation in {inputs.data}",
            reason=TerminationReason.DATA_MISMATCH,
            details=summary.as_dict(),
        )
    write_dataset(inputs.output, samples)
    write_token_freq(inputs.output, samples)
    manifest.update(status="tokenized", counts=summary.as_dict())
    hidden_store.write_manifest(inputs.output, manifest)
    return [sample.input_ids for sample in samples]


def _new_manifest(
    params: ExtractParams, inputs: _Inputs, key: str, key_inputs: dict[str, Any]
) -> dict[str, Any]:
    text = text_config(inputs.target_config)
    return {
        "format": hidden_store.MANIFEST_FORMAT,
        "layout": "speculators-offline",
        "status": "tokenizing",
        "fingerprint": key,
        "inputs": {k: v for k, v in key_inputs.items() if k != "target_config"},
        "target": {
            "path": str(inputs.target),
            **{k: text.get(k) for k in ("architectures", "model_type", "hidden_size", "vocab_size")},
            "num_hidden_layers": inputs.num_layers,
        },
        "tokenizer": str(inputs.tokenizer),
        "data": str(inputs.data),
        "aux_layers": inputs.aux_layers,
        "aux_capture": inputs.aux_capture.value,
        "sglang_version": params.sglang_version,
        "sglang_aux_layer_ids": list(inputs.sglang_ids),
        "states": ["aux_0", "aux_1", "aux_2", "last_pre_norm"],
        "dtype": params.dtype,
        "max_len": params.max_len,
        "created": datetime.now(UTC).isoformat(),
    }


def _check_disk(ctx: StageContext, params: ExtractParams, output: Path, need: int) -> None:
    free = params.disk_free_override_bytes
    if free is None:
        free = shutil.disk_usage(output).free
    required = int(need * (1 + params.disk_margin))
    ctx.log(f"disk: {_human(need)} to write, {_human(free)} free on {output}")
    if required > free:
        raise StageError(
            f"not enough disk space on {output}: the hidden states need {_human(required)} "
            f"(with a {params.disk_margin:.0%} margin), {_human(free)} are free",
            reason=TerminationReason.DISK_FULL,
            details={"required_bytes": required, "free_bytes": free},
        )


def _human(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1000
    raise AssertionError("unreachable")


def _extract(
    ctx: StageContext,
    params: ExtractParams,
    inputs: _Inputs,
    device: torch.device,
    pending: list[PendingSample],
    progress: ExtractProgress,
) -> None:
    ctx.log(f"serving: {inputs.serving_note}")
    ctx.log(f"loading the target {inputs.target} ({params.dtype}, {device})")
    with target_errors():
        model = load_target_model(
            inputs.target,
            dtype=inputs.dtype,
            device=device,
            trust_remote_code=inputs.trust_remote_code,
            log=ctx.log,
        )
    writer = AsyncWriter(
        inputs.output,
        threads=params.writer_threads,
        depth=params.queue_depth,
        durable=params.durable_writes,
    )
    try:
        extract_batches(
            model,
            length_sorted_batches(pending, params.batch_size),
            indices=extraction_indices(inputs.aux_layers, inputs.num_layers),
            capture=inputs.aux_capture,
            device=device,
            writer=writer,
            check_cancelled=ctx.check_cancelled,
            on_written=progress.update,
        )
    except BatchOutOfMemory as exc:
        raise out_of_memory(str(exc), exc.batch_size, exc.seq_len, ctx.gpus) from None
    finally:
        close_writer(writer, progress)
    progress.emit(force=True)


def _finish(
    ctx: StageContext,
    inputs: _Inputs,
    manifest: dict[str, Any],
    rows: list[list[int]],
    written_this_run: RunTotals,
    tokens_per_s: float,
) -> dict[str, Any]:
    files = [hidden_store.hidden_path(inputs.output, i) for i in range(len(rows))]
    written = sum(path.stat().st_size for path in files)
    tokens = sum(len(ids) for ids in rows)
    manifest.update(
        status="complete",
        samples=len(rows),
        tokens=tokens,
        bytes={"hidden_states": written, "per_token": round(written / max(tokens, 1), 1)},
        finished=datetime.now(UTC).isoformat(),
    )
    hidden_store.write_manifest(inputs.output, manifest)
    counts = manifest.get("counts", {})
    result = {"output": str(inputs.output), "samples": len(rows), "tokens": tokens, "bytes": written}
    result.update(dropped=counts.get("dropped", {}), truncated=counts.get("truncated", 0))
    result.update(written_this_run=written_this_run.samples, tokens_per_s=tokens_per_s)
    ctx.artifact("hidden_states", inputs.output, {k: manifest[k] for k in ("aux_layers", "dtype", "tokens")})
    ctx.progress(1.0, "done")
    described: dict[str, Any] = ctx.paths.describe_all(result)  # the output folder by the user's path
    return described
