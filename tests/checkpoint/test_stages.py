"""The fix_keys and doctor stages: params, artifacts, and CHECKPOINT_INVALID failures."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from contract.params.checkpoint import DoctorParams, FixKeysParams
from contract.params.common import StageParams
from contract.reasons import TerminationReason
from contract.stages import parse_params
from drafting.context import RecordingSink, StageContext, StageError
from drafting.stages import doctor, fix_keys, load_stage
from workers import stage_main


def _context(tmp_path: Path, *roots: Path) -> tuple[StageContext, RecordingSink]:
    sink = RecordingSink()
    return StageContext(work_dir=tmp_path, sink=sink, allowed_roots=roots), sink


def test_fix_keys_stage_writes_and_records_the_artifact(
    tmp_path: Path, speculators_draft: Path, target_dir: Path
) -> None:
    ctx, sink = _context(tmp_path)
    params = FixKeysParams(
        source=str(speculators_draft), dest=str(tmp_path / "out"), target_config=str(target_dir)
    )

    result = fix_keys.run(ctx, params)

    assert result["ok"] is True
    assert len(result["renamed"]) == 10
    artifacts = sink.of_type("artifact")
    assert [(a["kind"], a["path"]) for a in artifacts] == [("sglang_checkpoint", str(tmp_path / "out"))]
    assert artifacts[0]["meta"]["sglang_version"] == "0.5.14"
    assert sink.of_type("progress")[-1]["fraction"] == 1.0


def test_fix_keys_stage_refuses_an_unloadable_result(tmp_path: Path, broken_draft) -> None:  # type: ignore[no-untyped-def]
    draft = broken_draft(lambda config, tensors: config.update(norm_before_residual=True))
    ctx, sink = _context(tmp_path)

    with pytest.raises(StageError) as caught:
        fix_keys.run(ctx, FixKeysParams(source=str(draft), dest=str(tmp_path / "out")))

    assert caught.value.reason is TerminationReason.CHECKPOINT_INVALID
    assert "NORM_UNSUPPORTED" in caught.value.message
    assert caught.value.details["written"] is False
    assert not sink.of_type("artifact")
    assert not (tmp_path / "out").exists()


def test_fix_keys_stage_turns_unreadable_input_into_checkpoint_invalid(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    ctx, _ = _context(tmp_path)

    with pytest.raises(StageError) as caught:
        fix_keys.run(ctx, FixKeysParams(source=str(empty), dest=str(tmp_path / "out")))

    assert caught.value.reason is TerminationReason.CHECKPOINT_INVALID
    assert "no *.safetensors" in caught.value.message


def _stage_process(tmp_path: Path, kind: str, params: StageParams, *roots: Path) -> tuple[int, RecordingSink]:
    """The stage as its process runs it (workers.stage_main: params read, paths checked, stage run)."""
    ctx, sink = _context(tmp_path, *roots)
    params_file = tmp_path / f"{kind}-params.json"
    params_file.write_text(params.model_dump_json())
    return stage_main._run(ctx, sink, kind, params_file), sink


def test_the_stage_process_refuses_paths_outside_allowed_roots(
    tmp_path: Path, clean_draft: Path, speculators_draft: Path
) -> None:
    """Checked once, in the stage process, before the stage starts: nothing is read or written."""
    only_here = tmp_path / "only-here"
    only_here.mkdir()
    code, sink = _stage_process(tmp_path, "doctor", DoctorParams(draft=str(clean_draft)), only_here)
    assert code == 1
    (error,) = sink.of_type("error")
    assert error["reason"] == TerminationReason.PATH_NOT_ALLOWED
    assert str(clean_draft) in error["message"]
    assert str(only_here) in error["message"]

    # fix_keys from an allowed source into a folder outside the roots, directly or through a symlink
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (speculators_draft.parent / "link").unlink(missing_ok=True)
    (speculators_draft.parent / "link").symlink_to(elsewhere)
    for dest in (tmp_path / "out", speculators_draft.parent / "link" / "out"):
        params = FixKeysParams(source=str(speculators_draft), dest=str(dest))
        code, sink = _stage_process(tmp_path, "fix_keys", params, speculators_draft.parent)
        assert code == 1
        (error,) = sink.of_type("error")
        assert error["reason"] == TerminationReason.PATH_NOT_ALLOWED
        assert str(dest) in error["message"]
        assert [e["type"] for e in sink.events] == ["error"]  # the stage never started
        assert not (tmp_path / "out").exists()
        assert list(elsewhere.iterdir()) == []
    (speculators_draft.parent / "link").unlink()


def test_doctor_stage_passes_a_clean_draft_and_fails_a_broken_one(
    tmp_path: Path, clean_draft: Path, speculators_draft: Path, target_dir: Path
) -> None:
    ctx, _sink = _context(tmp_path)
    result = doctor.run(ctx, DoctorParams(draft=str(clean_draft), target=str(target_dir)))
    assert result["ok"] is True

    with pytest.raises(StageError) as caught:
        doctor.run(
            ctx, DoctorParams(draft=str(speculators_draft), target=str(target_dir), sglang_version="0.5.11")
        )
    assert caught.value.reason is TerminationReason.CHECKPOINT_INVALID
    assert "TENSOR_IGNORED" in caught.value.message
    assert caught.value.details["ok"] is False


def test_params_are_validated_at_submit_time() -> None:
    parsed = parse_params("fix_keys", {"source": "/a", "dest": "/b", "sglang_version": "0.5.12.post1"})
    assert isinstance(parsed, FixKeysParams)
    assert parsed.host_paths() == ["/a", "/b"]
    assert DoctorParams(draft="/d", target="/t").host_paths() == ["/d", "/t"]
    with pytest.raises(ValidationError):
        FixKeysParams(source="relative/path", dest="/b")
    with pytest.raises(ValidationError):
        FixKeysParams(source="/a", dest="/b", sglang_version="latest")
    with pytest.raises(ValidationError):
        DoctorParams(draft="/d", algorithm="MEDUSA")
    with pytest.raises(ValidationError):
        FixKeysParams(source="/a", dest="/b", unknown=1)


def test_stage_registry_finds_both_stages() -> None:
    assert load_stage("fix_keys") is fix_keys.run
    assert load_stage("doctor") is doctor.run
