"""fix_keys: turn a speculators or EAGLE/SpecForge drafter into a checkpoint every SGLang 0.5.x loads.

The source is only ever opened for reading. The result is built in a temporary folder beside the
destination, checked by the doctor, and renamed into place only when complete and clean; tensors are
copied one at a time, byte ranges straight from the source files, so memory stays flat.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from drafting.checkpoint import atomic
from drafting.checkpoint.convert import build_sglang_config, plan_tensors
from drafting.checkpoint.doctor import DEFAULT_SGLANG_VERSION, diagnose, run_checks
from drafting.checkpoint.errors import PickleWeightsError
from drafting.checkpoint.report import DoctorReport, FixReport
from drafting.checkpoint.safetensors_io import (
    FileRange,
    OutputTensor,
    TensorEntry,
    shard_names,
    split_into_shards,
    write_file,
)
from drafting.checkpoint.source import INDEX_NAME, DraftCheckpoint, open_checkpoint
from drafting.checkpoint.target import TargetModel, load_target
from drafting.checkpoint.view import DraftView
from drafting.outputs import OutputMark
from drafting.sglang_facts import format_version, parse_version, rules_for

ProgressCallback = Callable[[int, int, str], None]
"""(bytes done, bytes total, tensor just written); may raise to abort (the workspace is removed)."""

DEFAULT_MAX_SHARD_BYTES = 5 * 1024**3


def fix_checkpoint(
    source: Path,
    dest: Path,
    *,
    target: Path | None = None,
    sglang_version: str = DEFAULT_SGLANG_VERSION,
    force: bool = False,
    allow_pickle: bool = False,
    on_progress: ProgressCallback | None = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    mark: OutputMark | None = None,
) -> FixReport:
    """Convert `source` into SGLang's layout at `dest`; report.ok False (dest untouched) if it would not load.

    Raises CheckpointError for inputs it cannot read, for an existing `dest` without `force`, and for an
    existing `dest` eyas did not make (force replaces only folders carrying eyas's marker, `mark`).
    """
    rules_for(sglang_version)  # refuse a malformed or unknown version before touching anything
    version = format_version(parse_version(sglang_version))
    source, dest = Path(source).absolute(), Path(dest).absolute()
    with atomic.Destination(dest, mark or OutputMark("fix_keys")) as place:
        place.clean_stale()  # first: it may put back a destination a killed run had set aside
        place.check(source, force=force)
        target_model = load_target(Path(target)) if target is not None else None
        return _convert(
            source, place, target, target_model, version, allow_pickle, on_progress, max_shard_bytes
        )


def _convert(
    source: Path,
    place: atomic.Destination,
    target: Path | None,
    target_model: TargetModel | None,
    version: str,
    allow_pickle: bool,
    on_progress: ProgressCallback | None,
    max_shard_bytes: int,
) -> FixReport:
    dest = place.path
    with place.workspace() as work:
        checkpoint = _open_source(source, work, allow_pickle)
        report = FixReport(str(source), str(dest), version, written=False)
        config, report.config_changes = build_sglang_config(
            checkpoint.config, target_model, checkpoint.tensors, version
        )
        report.moves = plan_tensors(checkpoint.tensors, config)
        planned = {m.dest: replace(checkpoint.tensors[m.source], name=m.dest) for m in report.moves if m.dest}
        report.doctor = _preflight(dest, config, planned, target_model, version)
        if not report.doctor.ok:
            return report  # refuse before writing a byte
        out = work / "out"
        report.files, report.bytes_written = _write(out, config, planned, max_shard_bytes, on_progress)
        report.doctor = diagnose(out, target=target, sglang_version=version)
        report.doctor.draft = str(dest)
        if not report.doctor.ok:
            return report
        place.mark(out)
        place.move_into_place(out)
        report.written = True
    return report


def _open_source(source: Path, work: Path, allow_pickle: bool) -> DraftCheckpoint:
    try:
        return open_checkpoint(source)
    except PickleWeightsError:
        if not allow_pickle:
            raise
    from drafting.checkpoint.pickle_input import stage_pickle_checkpoint  # torch only on this path

    return stage_pickle_checkpoint(source, work / "pickle-staging")


def _preflight(
    dest: Path,
    config: dict[str, object],
    planned: dict[str, TensorEntry],
    target: TargetModel | None,
    version: str,
) -> DoctorReport:
    view = DraftView(
        label=str(dest),
        config=config,
        tensors=planned,
        rules=rules_for(version),
        version=version,
        algorithm="EAGLE3",
        target=target,
    )
    return run_checks(view)


def _write(
    out: Path,
    config: dict[str, object],
    planned: dict[str, TensorEntry],
    max_shard_bytes: int,
    on_progress: ProgressCallback | None,
) -> tuple[list[str], int]:
    """config.json, the shards (one tensor at a time) and, for several shards, their index."""
    out.mkdir()
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    tensors = [
        OutputTensor(e.name, e.dtype, e.shape, FileRange(e.file, e.start, e.nbytes))
        for _, e in sorted(planned.items())
    ]
    total, done = sum(t.source.nbytes for t in tensors), 0

    def progress(tensor: OutputTensor) -> None:
        nonlocal done
        done += tensor.source.nbytes
        if on_progress is not None:
            on_progress(done, total, tensor.name)

    shards = split_into_shards(tensors, max_shard_bytes)
    names = list(shard_names(len(shards)))
    for name, shard in zip(names, shards, strict=True):
        write_file(out / name, shard, on_tensor=progress)
    if len(shards) > 1:
        weight_map = {t.name: name for name, shard in zip(names, shards, strict=True) for t in shard}
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    atomic.fsync_dir(out)
    return ["config.json", *names] + ([INDEX_NAME] if len(shards) > 1 else []), total
