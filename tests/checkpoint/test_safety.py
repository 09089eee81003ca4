"""The converter never harms the source or an old destination, and names the file it cannot read."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys
import threading
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file, save_file

from drafting.checkpoint import CheckpointError, PickleWeightsError, diagnose, fix_checkpoint
from drafting.outputs import MARKER, OutputMark, write_mark
from drafting.proc import run_command
from tests.checkpoint.conftest import folder_digest
from tests.checkpoint.test_convert import SGLANG_EXPECTED, _shapes

REPO_ROOT = Path(__file__).resolve().parents[2]


def reshard(source: Path, dest: Path, *, shards: int) -> Path:
    """The same checkpoint split over several files with a model.safetensors.index.json."""
    dest.mkdir()
    shutil.copy(source / "config.json", dest / "config.json")
    tensors = load_file(source / "model.safetensors")
    names = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::shards]}
        save_file(part, dest / file, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    (dest / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return dest


def _leftovers(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.parent.iterdir() if p.name.startswith(f".{dest.name}."))


def test_existing_destination_is_refused_without_force(tmp_path: Path, clean_draft: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "keep.txt").write_text("old")

    with pytest.raises(CheckpointError, match="already exists"):
        fix_checkpoint(clean_draft, dest)
    assert (dest / "keep.txt").read_text() == "old"


def eyas_output(dest: Path) -> Path:
    """An existing destination eyas made earlier: a folder with a file in it and eyas's output marker."""
    dest.mkdir()
    (dest / "keep.txt").write_text("old")
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_mark(fd, OutputMark("fix_keys", "an-earlier-job"))
    finally:
        os.close(fd)
    return dest


def test_force_replaces_an_eyas_destination_once_complete(tmp_path: Path, clean_draft: Path) -> None:
    dest = eyas_output(tmp_path / "out")

    report = fix_checkpoint(clean_draft, dest, force=True, mark=OutputMark("fix_keys", "this-job"))

    assert report.ok
    assert not (dest / "keep.txt").exists()
    assert _shapes(dest) == SGLANG_EXPECTED
    assert json.loads((dest / MARKER).read_text())["job_id"] == "this-job"
    assert _leftovers(dest) == []


def test_force_never_replaces_a_folder_eyas_did_not_make(tmp_path: Path, clean_draft: Path) -> None:
    dest = tmp_path / "users-folder"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    (dest / "sub").mkdir()
    (dest / "sub" / "data.bin").write_bytes(b"\x00" * 10)
    before = folder_digest(dest)

    with pytest.raises(CheckpointError, match="eyas did not make it"):
        fix_checkpoint(clean_draft, dest, force=True)

    assert folder_digest(dest) == before
    assert _leftovers(dest) == []


def test_force_does_not_follow_a_symlink_at_the_destination(tmp_path: Path, clean_draft: Path) -> None:
    elsewhere = eyas_output(tmp_path / "elsewhere")
    before = folder_digest(elsewhere)
    (tmp_path / "out").symlink_to(elsewhere)

    with pytest.raises(CheckpointError, match="not a folder"):
        fix_checkpoint(clean_draft, tmp_path / "out", force=True)

    assert folder_digest(elsewhere) == before
    assert (tmp_path / "out").is_symlink()


def test_destination_inside_source_is_refused(clean_draft: Path) -> None:
    with pytest.raises(CheckpointError, match="overlaps"):
        fix_checkpoint(clean_draft, clean_draft / "sglang")


def test_failure_midway_leaves_old_destination_and_no_leftovers(
    tmp_path: Path, speculators_draft: Path
) -> None:
    dest = eyas_output(tmp_path / "out")
    source_before, dest_before = folder_digest(speculators_draft), folder_digest(dest)
    seen: list[str] = []

    def fail_after_three(done: int, total: int, name: str) -> None:
        seen.append(name)
        if len(seen) == 3:
            raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        fix_checkpoint(speculators_draft, dest, force=True, on_progress=fail_after_three)

    assert folder_digest(dest) == dest_before
    assert folder_digest(speculators_draft) == source_before
    assert _leftovers(dest) == []


_KILLED_CHILD = """
import sys, time
from pathlib import Path
from drafting.checkpoint import fix_checkpoint

def pause(done, total, name):
    print("HALFWAY", flush=True)
    time.sleep(60)

fix_checkpoint(Path(sys.argv[1]), Path(sys.argv[2]), force=True, on_progress=pause)
"""


def test_killed_conversion_leaves_source_and_old_destination(tmp_path: Path, speculators_draft: Path) -> None:
    """SIGTERM/SIGKILL to a real converter process midway: nothing it was not building changes."""
    dest = eyas_output(tmp_path / "out")
    source_before, dest_before = folder_digest(speculators_draft), folder_digest(dest)
    cancel, lines = threading.Event(), []

    def on_line(stream: str, text: str) -> None:
        lines.append(text)
        if text == "HALFWAY":
            cancel.set()

    argv = [sys.executable, "-c", _KILLED_CHILD, str(speculators_draft), str(dest)]
    result = run_command(
        argv, on_line=on_line, cwd=REPO_ROOT, env=dict(os.environ), cancel=cancel, grace_s=0.5
    )

    assert result.cancelled, lines
    assert folder_digest(dest) == dest_before
    assert folder_digest(speculators_draft) == source_before
    assert [n for n in _leftovers(dest) if ".eyas-tmp-" in n]  # the dead run's half-built folder
    assert fix_checkpoint(speculators_draft, dest, force=True).ok  # the next run clears it
    assert _leftovers(dest) == []


def test_a_run_killed_while_marking_its_folder_is_cleared_by_the_next(
    tmp_path: Path, speculators_draft: Path
) -> None:
    """A converter killed between making its work folder and finishing the marker leaves the folder empty or
    holding a marker cut short; the next run clears both. A folder of that name holding anything else, with
    no marker, is not provably eyas's and stays."""
    dead = psutil.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid no process holds (reaped)
    dest = tmp_path / "out"
    empty = tmp_path / f".out.eyas-tmp-{dead.pid}-0a1b2c3d"
    cut = tmp_path / f".out.eyas-tmp-{dead.pid}-4e5f6a7b"
    foreign = tmp_path / f".out.eyas-tmp-{dead.pid}-8c9d0e1f"
    for folder in (empty, cut, foreign):
        folder.mkdir()
    (cut / MARKER).write_text('{"made_by": "ey')
    (foreign / "notes.txt").write_text("someone else's")
    assert fix_checkpoint(speculators_draft, dest).ok
    assert _leftovers(dest) == [foreign.name]


def test_result_with_an_error_is_refused_and_not_written(tmp_path: Path, broken_draft) -> None:  # type: ignore[no-untyped-def]
    draft = broken_draft(lambda config, tensors: config.update(norm_before_residual=True))

    report = fix_checkpoint(draft, tmp_path / "out")

    assert not report.ok
    assert not report.written
    assert report.doctor is not None
    assert "NORM_UNSUPPORTED" in report.doctor.codes()
    assert not (tmp_path / "out").exists()
    assert _leftovers(tmp_path / "out") == []
    assert "REFUSED" in report.render_text()


def _copy(clean_draft: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "draft"
    shutil.copytree(clean_draft, folder)
    return folder


def test_truncated_file_is_named(tmp_path: Path, clean_draft: Path) -> None:
    draft = _copy(clean_draft, tmp_path)
    weights = draft / "model.safetensors"
    os.truncate(weights, weights.stat().st_size - 100)

    report = diagnose(draft)
    assert report.codes() == {"UNREADABLE"}
    assert str(weights) in report.findings[0].message
    assert "truncated" in report.findings[0].message
    with pytest.raises(CheckpointError, match="truncated") as caught:
        fix_checkpoint(draft, tmp_path / "out")
    assert caught.value.path == weights
    assert not (tmp_path / "out").exists()


def _dead_pid() -> int:
    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


def test_destination_set_aside_by_a_killed_swap_is_put_back(tmp_path: Path, clean_draft: Path) -> None:
    """A run killed between its two renames left the old destination aside; the next run restores it."""
    dest = tmp_path / "out"
    aside = tmp_path / f".out.eyas-old-{_dead_pid()}"
    aside.mkdir()
    (aside / "keep.txt").write_text("old")

    with pytest.raises(CheckpointError, match="already exists"):
        fix_checkpoint(clean_draft, dest)
    assert (dest / "keep.txt").read_text() == "old"
    assert not aside.exists()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda raw: raw[:8] + b"\xff" * 16 + raw[24:], "not valid JSON"),
        (lambda raw: (10**12).to_bytes(8, "little") + raw[8:], "exceeds the file"),
        (lambda raw: raw[:5], "too short"),
    ],
)
def test_corrupt_header_is_named(tmp_path: Path, clean_draft: Path, damage, message: str) -> None:  # type: ignore[no-untyped-def]
    draft = _copy(clean_draft, tmp_path)
    weights = draft / "model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))

    with pytest.raises(CheckpointError, match=message) as caught:
        fix_checkpoint(draft, tmp_path / "out")
    assert str(weights) in caught.value.message


def test_config_that_is_not_json_is_named(tmp_path: Path, clean_draft: Path) -> None:
    draft = _copy(clean_draft, tmp_path)
    (draft / "config.json").write_text("{'architectures': oops")

    with pytest.raises(CheckpointError, match="config.json is not valid JSON") as caught:
        fix_checkpoint(draft, tmp_path / "out")
    assert caught.value.path == draft / "config.json"
    assert diagnose(draft).codes() == {"UNREADABLE"}


def test_missing_index_entry_is_named(tmp_path: Path, clean_draft: Path) -> None:
    draft = reshard(clean_draft, tmp_path / "sharded", shards=2)
    index_path = draft / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    del index["weight_map"]["fc.weight"]
    index_path.write_text(json.dumps(index))

    with pytest.raises(CheckpointError, match="missing index entry for 'fc.weight'"):
        fix_checkpoint(draft, tmp_path / "out")


def test_index_naming_a_missing_shard_is_named(tmp_path: Path, clean_draft: Path) -> None:
    draft = reshard(clean_draft, tmp_path / "sharded", shards=2)
    (draft / "model-00002-of-00002.safetensors").unlink()

    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors, which does not exist"):
        fix_checkpoint(draft, tmp_path / "out")


class _RunsCodeWhenUnpickled:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.mkdir, (str(self.marker),))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pickle_is_never_unpickled_without_the_flag(tmp_path: Path, clean_draft: Path) -> None:
    draft, marker = tmp_path / "draft", tmp_path / "pwned"
    draft.mkdir()
    shutil.copy(clean_draft / "config.json", draft / "config.json")
    (draft / "pytorch_model.bin").write_bytes(pickle.dumps({"fc.weight": _RunsCodeWhenUnpickled(marker)}))

    assert diagnose(draft).codes() == {"PICKLE_WEIGHTS"}
    with pytest.raises(PickleWeightsError, match="pytorch_model.bin"):
        fix_checkpoint(draft, tmp_path / "out")
    with pytest.raises(CheckpointError, match="weights-only"):  # even allowed, only weights_only loading
        fix_checkpoint(draft, tmp_path / "out", allow_pickle=True)
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


def test_eagle_pickle_converts_with_the_flag(tmp_path: Path, clean_draft: Path, target_dir: Path) -> None:
    """EAGLE's DeepSpeed output: pytorch_model.bin wrapping the state dict in `module`, a Llama config."""
    draft = tmp_path / "eagle"
    draft.mkdir()
    config = json.loads((clean_draft / "config.json").read_text())
    config["architectures"] = ["LlamaForCausalLM"]
    (draft / "config.json").write_text(json.dumps(config))
    torch.save({"module": load_file(clean_draft / "model.safetensors")}, draft / "pytorch_model.bin")

    report = fix_checkpoint(draft, tmp_path / "out", target=target_dir, allow_pickle=True)

    assert report.ok, report.render_text()
    assert _shapes(tmp_path / "out") == SGLANG_EXPECTED
    assert any("architectures" in change for change in report.config_changes)
