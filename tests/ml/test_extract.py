"""The extract stage end to end on a tiny random Llama: layout, values, resume, disk refusal."""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import load_from_disk
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from contract.params.extract import ExtractParams
from contract.reasons import TerminationReason
from drafting.context import RecordingSink, StageCancelled, StageContext, StageError
from drafting.ml.hidden_store import hidden_path
from drafting.stages import extract
from testsupport.tiny_targets import chat, random_target, write_jsonl

AUX = [2, 4, 5]  # SGLang's default [2, N//2, N-3] for 8 layers


@pytest.fixture
def target(tmp_path: Path) -> Path:
    return random_target(tmp_path / "target")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rng = random.Random(0)
    records: list[Any] = [chat(rng, turns=1 + i % 3, words=3 + i % 5, sharegpt=i % 2 == 1) for i in range(10)]
    records.insert(3, "{broken")
    records.insert(6, {"messages": [{"role": "user", "content": "w1 w2"}]})
    records.append(chat(rng, turns=2, words=30))  # longer than max_len: truncated
    return write_jsonl(tmp_path / "data.jsonl", records)


def _params(target: Path, data: Path, output: Path, **overrides: Any) -> ExtractParams:
    values = {
        "target": str(target),
        "data": str(data),
        "output": str(output),
        "max_len": 64,
        "batch_size": 3,
        "dtype": "float32",
        "device": "cpu",
        "writer_threads": 2,
        **overrides,
    }
    return ExtractParams(**values)


def _run(params: ExtractParams, sink: RecordingSink | None = None, tmp: Path | None = None) -> dict[str, Any]:
    ctx = StageContext(work_dir=tmp or Path(params.output).parent, sink=sink or RecordingSink())
    if isinstance(sink, _CancelOnFirstWrite):
        sink.cancel = ctx.cancel
    return extract.run(ctx, params)


@dataclass
class _CancelOnFirstWrite(RecordingSink):
    """Asks the stage to stop as soon as it reports its first written batch (what a user's cancel does)."""

    cancel: threading.Event = field(default_factory=threading.Event)

    def emit(self, event: dict[str, Any]) -> None:
        super().emit(event)
        if event["type"] == "metric" and event["name"] == "extract/samples_written":
            self.cancel.set()


def test_extract_writes_speculators_layout_with_assistant_masks(
    target: Path, data: Path, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    sink = RecordingSink()
    result = _run(_params(target, data, output), sink)

    manifest = json.loads((output / "eyas_manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["aux_layers"] == AUX
    assert manifest["sglang_aux_layer_ids"] == [1, 3, 4]
    assert manifest["counts"]["dropped"] == {"malformed_record": 1, "no_assistant_turn": 1}
    assert manifest["counts"]["truncated"] == 1
    assert result["samples"] == manifest["samples"] == 11

    rows = load_from_disk(str(output))
    assert rows.column_names == ["input_ids", "loss_mask", "seq_len"]
    token_freq = torch.load(output / "token_freq.pt")
    expected_freq: dict[int, int] = {}
    total_bytes = 0
    for i, row in enumerate(rows):
        stored = load_file(hidden_path(output, i))
        seq = int(row["seq_len"])
        assert stored["hidden_states"].shape == (seq, 4, 32)
        assert stored["hidden_states"].dtype == torch.float32
        assert torch.equal(stored["token_ids"], row["input_ids"])
        assert row["loss_mask"].sum() > 0
        assert seq <= 64
        for token, keep in zip(row["input_ids"].tolist(), row["loss_mask"].tolist(), strict=True):
            if keep:
                expected_freq[token] = expected_freq.get(token, 0) + 1
        total_bytes += hidden_path(output, i).stat().st_size
    assert token_freq == expected_freq
    assert manifest["bytes"]["hidden_states"] == total_bytes
    assert sink.of_type("progress")[-1]["fraction"] == 1.0
    assert {e["name"] for e in sink.of_type("metric")} >= {"extract/tokens_per_s", "extract/bytes_written"}


@torch.no_grad()
def test_stored_states_are_the_targets_hidden_states(target: Path, data: Path, tmp_path: Path) -> None:
    output = tmp_path / "out"
    _run(_params(target, data, output))
    model = AutoModelForCausalLM.from_pretrained(target).eval()
    for index in (0, 5, 10):  # rows of different lengths, batched with padding
        stored = load_file(hidden_path(output, index))
        reference = model(input_ids=stored["token_ids"][None], output_hidden_states=True).hidden_states
        for slot, layer in enumerate(AUX):
            torch.testing.assert_close(
                stored["hidden_states"][:, slot], reference[layer][0], rtol=1e-4, atol=1e-4
            )
        # The 4th state is the last decoder layer *before* the final norm (HF's hidden_states[-1] is after).
        last = stored["hidden_states"][:, 3]
        torch.testing.assert_close(model.model.norm(last), reference[-1][0], rtol=1e-4, atol=1e-4)
        assert not torch.allclose(last, reference[-1][0], atol=1e-3)


def _stamps(output: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (output / "hidden_states").iterdir()}


def test_cancel_then_resume_redoes_only_what_is_missing(target: Path, data: Path, tmp_path: Path) -> None:
    output = tmp_path / "out"
    params = _params(target, data, output)
    with pytest.raises(StageCancelled):
        _run(params, _CancelOnFirstWrite())
    before = _stamps(output)
    assert 0 < len(before) < 11  # the first batch landed, the rest did not

    _run(params)
    after = _stamps(output)
    assert len(after) == 11
    assert {name: after[name] for name in before} == before  # finished files were not rewritten


def test_resume_redoes_torn_and_temporary_files(target: Path, data: Path, tmp_path: Path) -> None:
    output = tmp_path / "out"
    params = _params(target, data, output)
    _run(params)
    torn, missing = hidden_path(output, 4), hidden_path(output, 7)
    torn.write_bytes(torn.read_bytes()[:100])  # what a non-atomic writer killed mid-file would leave
    missing.unlink()
    stray = output / "hidden_states" / "hs_9.safetensors.tmp-12345"
    stray.write_bytes(b"partial")
    before = _stamps(output)

    result = _run(params)
    after = _stamps(output)
    assert result["written_this_run"] == 2
    assert not stray.exists()
    rewritten = {name for name in after if before.get(name) != after[name]}
    assert rewritten == {torn.name, missing.name}
    assert load_file(torn)["hidden_states"].shape[1:] == (4, 32)


def test_disk_check_refuses_before_writing(target: Path, data: Path, tmp_path: Path) -> None:
    output = tmp_path / "out"
    with pytest.raises(StageError) as caught:
        _run(_params(target, data, output, disk_free_override_bytes=10_000))
    assert caught.value.reason == TerminationReason.DISK_FULL
    assert caught.value.details["required_bytes"] > 10_000
    assert "not enough disk space" in caught.value.message
    assert list((output / "hidden_states").iterdir()) == []


def test_other_inputs_into_the_same_output_are_refused(target: Path, data: Path, tmp_path: Path) -> None:
    output = tmp_path / "out"
    _run(_params(target, data, output))
    with pytest.raises(StageError) as caught:
        _run(_params(target, data, output, max_len=32))
    assert caught.value.reason == TerminationReason.DATA_MISMATCH


def test_aux_layers_sglang_cannot_capture_are_refused(target: Path, data: Path, tmp_path: Path) -> None:
    with pytest.raises(StageError) as caught:
        _run(_params(target, data, tmp_path / "out", aux_layers=[2, 4, 8]))
    assert caught.value.reason == TerminationReason.DATA_MISMATCH


def test_needs_gpus_follows_the_device(target: Path, data: Path, tmp_path: Path) -> None:
    assert _params(target, data, tmp_path, device="cuda").needs_gpus()
    assert not _params(target, data, tmp_path, device="cpu").needs_gpus()
