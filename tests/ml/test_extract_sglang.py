"""extract's sglang backend, as far as it runs without a GPU: the params and their refusal at submit, the
host check and its refusal from the stage process, the packing, the final-norm capture, the capture-point
guard, and the writing path producing the HF backend's layout.

SGLang's model classes themselves need CUDA and SGLang's kernels (bench/capture.py runs them against
the HF backend on a GPU host)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from pydantic import ValidationError
from torch import nn
from transformers import AutoModelForCausalLM

from contract.params.extract import ExtractParams
from contract.reasons import TerminationReason
from drafting.context import StageCancelled, StageContext
from drafting.ml._dataset import read_dataset_rows
from drafting.ml._writer import AsyncWriter, Written
from drafting.ml.capture import capture_layers, decoder_of
from drafting.ml.distributed import Ranks
from drafting.ml.extraction import BatchOutOfMemory, PendingSample, pending_samples
from drafting.ml.hidden_store import HIDDEN_DIR, hidden_path, is_complete, load_sample, read_header
from drafting.ml.sglang_capture import CAPTURE_RELEASE, FinalNormInput, check_capture_points, no_capture_hook
from drafting.ml.sglang_extraction import (
    BatchLimits,
    CaptureRefused,
    extract_packed,
    pack_batches,
    packed_states,
    too_long,
)
from drafting.serving.launch.sglang_parser import installed_sglang_version
from drafting.stages import extract
from drafting.stages._extract_sglang import _agree_on_cancel, host_problem
from tests.ml.stage_process import run_stage_process
from testsupport.tiny_targets import chat, random_target, write_jsonl

AUX = [2, 4, 5]  # SGLang's default [2, N//2, N-3] for the tiny target's 8 layers
Headers = dict[str, str]


def _params(**values: Any) -> ExtractParams:
    return ExtractParams(**{"target": "/t", "data": "/d.jsonl", "output": "/o", **values})


# ---- params: what a request may ask of the sglang backend, refused at submit time


def test_backend_and_tp_size_size_the_lease() -> None:
    assert _params(backend="sglang", tp_size=4).gpus_needed() == 4
    assert _params(backend="sglang", tp_size=4, ranks=4).gpus_conflict(4) is None
    assert "exactly tp_size GPUs" in (_params(backend="sglang", tp_size=2).gpus_conflict(4) or "")
    assert _params().gpus_needed() == 1  # hf keeps its data-parallel default


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"backend": "vllm"}, "'hf' or 'sglang'"),
        ({"tp_size": 2}, "tp_size only apply to backend sglang"),
        ({"attention_backend": "triton"}, "attention_backend only apply to backend sglang"),
        ({"backend": "sglang", "device": "cpu"}, "device must be cuda"),
        ({"backend": "sglang", "tp_size": 2, "ranks": 4}, "ranks is 4 but tp_size is 2"),
        ({"backend": "sglang", "attention_backend": "fast"}, "'triton'"),
        ({"backend": "sglang", "tp_size": 0}, "greater than or equal to 1"),
        ({"backend": "sglang", "sglang_version": "0.5.23"}, "would record another release's capture"),
    ],
)
def test_params_the_backend_cannot_honour_are_refused(values: dict[str, Any], said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        _params(**values)


def test_submit_refuses_gpus_that_contradict_tp_size(client: TestClient, admin: Headers) -> None:
    before = client.get("/v1/jobs", params={"kind": "extract"}, headers=admin).json()["items"]
    params = {
        "target": "/tmp/t",
        "data": "/tmp/d.jsonl",
        "output": "/tmp/o",
        "backend": "sglang",
        "tp_size": 2,
    }
    response = client.post("/v1/jobs", json={"kind": "extract", "params": params, "gpus": 4}, headers=admin)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "INVALID_PARAMS"
    assert "tp_size is 2 but the job asks for 4 GPU(s)" in response.json()["detail"]
    params["tp_size"], params["device"] = 1, "cpu"
    response = client.post("/v1/jobs", json={"kind": "extract", "params": params}, headers=admin)
    assert response.status_code == 422, response.text
    assert "device must be cuda" in response.text
    assert client.get("/v1/jobs", params={"kind": "extract"}, headers=admin).json()["items"] == before


# ---- the host check, before any rank starts


def test_host_problem_names_each_missing_piece() -> None:
    assert host_problem(CAPTURE_RELEASE, 2, 2, 2) is None
    assert host_problem(f"{CAPTURE_RELEASE}.post1", 1, 1, 1) is None

    missing = host_problem(None, 0, 1, 1)
    assert missing is not None
    assert missing.reason == TerminationReason.NO_GPU
    assert "this host shows 0" in missing.message
    assert f"sglang is not installed here (install sglang=={CAPTURE_RELEASE})" in missing.message

    other = host_problem("0.5.23", 8, 2, 2)
    assert other is not None
    assert other.reason == TerminationReason.PREFLIGHT_FAILED
    assert "sglang 0.5.23 is installed" in other.message
    assert "CUDA" not in other.message
    assert host_problem("not-a-version", 1, 1, 1) is not None

    too_few = host_problem(CAPTURE_RELEASE, 1, 2, 2)
    assert too_few is not None
    assert "tp_size 2 needs 2, this host shows 1" in too_few.message

    split = host_problem(CAPTURE_RELEASE, 8, 2, 4)
    assert split is not None
    assert "the job holds 4 GPU(s)" in split.message


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a host without CUDA")
def test_the_stage_refuses_this_host_before_touching_anything(tmp_path: Path) -> None:
    target = random_target(tmp_path / "target")
    data = write_jsonl(tmp_path / "data.jsonl", [chat(random.Random(0), turns=1, words=4)])
    output = tmp_path / "out"
    params = ExtractParams(target=str(target), data=str(data), output=str(output), backend="sglang")
    run = run_stage_process("extract", params, tmp_path)

    assert run.result.exit_code != 0
    errors = run.of_type("error")
    assert [e["reason"] for e in errors] == [TerminationReason.NO_GPU.value]
    installed = installed_sglang_version()
    expected = "sglang is not installed here" if installed is None else f"sglang {installed} is installed"
    assert expected in errors[0]["message"]
    assert f"install sglang=={CAPTURE_RELEASE}" in errors[0]["message"]
    assert "Traceback" not in run.log
    assert not output.exists()


# ---- packing and the packed states


def _pending(*lengths: int) -> list[PendingSample]:
    return [PendingSample(i, list(range(n))) for i, n in enumerate(lengths)]


def test_packing_fills_by_tokens_longest_first() -> None:
    pending = _pending(5, 30, 12, 12, 3, 40, 8)
    batches = pack_batches(pending, BatchLimits(max_samples=3, max_tokens=32, max_sample_tokens=64))
    assert [[s.index for s in b] for b in batches] == [[5], [1], [2, 3, 6], [0, 4]]
    assert sorted(s.index for b in batches for s in b) == list(range(7))
    assert too_long(pending, BatchLimits(8, 64, max_sample_tokens=30)) == [pending[5]]


def test_packed_states_are_the_aux_concat_then_the_last_state() -> None:
    tokens, hidden = 5, 4
    aux = [torch.randn(tokens, hidden) for _ in range(3)]
    last = torch.randn(tokens, hidden)
    states = packed_states(torch.cat(aux, dim=-1), last)  # SGLang's logits processor: torch.cat(aux, -1)
    assert states.shape == (tokens, 4, hidden)
    for slot in range(3):
        assert torch.equal(states[:, slot], aux[slot])
    assert torch.equal(states[:, 3], last)
    with pytest.raises(CaptureRefused, match="not 3 layers of 4"):
        packed_states(last, last)  # a class that captured nothing hands back the post-norm state alone


# ---- the final norm's input and the capture points


class _FusedAddNorm(nn.Module):
    """The contract of SGLang's RMSNorm with a residual (`layers/layernorm.py` forward_cuda: the fused kernel
    writes x + residual into `residual` and the normed sum into `x`, in place). Its CUDA kernel cannot run
    here, so this reproduces what the hook must survive."""

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> Any:
        if residual is None:
            return x / x.norm(dim=-1, keepdim=True)
        residual.add_(x)
        x.copy_(residual / residual.norm(dim=-1, keepdim=True))
        return x, residual


def test_final_norm_input_is_the_sum_before_the_in_place_norm() -> None:
    norm = _FusedAddNorm()
    kept = FinalNormInput(norm)
    x, residual = torch.randn(6, 4), torch.randn(6, 4)
    expected = x + residual
    norm(x, residual)
    assert torch.equal(kept.take(), expected)
    alone = torch.randn(6, 4)
    norm(alone)
    assert torch.equal(kept.take(), alone)
    norm(alone)
    norm(alone)
    with pytest.raises(CaptureRefused, match="ran 2 times"):
        kept.take()
    kept.clear()
    kept.remove()
    norm(alone)
    with pytest.raises(CaptureRefused, match="ran 0 times"):
        kept.take()


def test_capture_points_other_than_the_recorded_layers_are_refused() -> None:
    check_capture_points("LlamaForCausalLM", [2, 16, 29], [1, 15, 28], [2, 16, 29])
    # DeepSeek-V2/V3 add 1 only when ids[0] == 1: ids [2, 3, 4] land one layer before aux [3, 4, 5].
    with pytest.raises(CaptureRefused) as refused:
        check_capture_points("DeepseekV3ForCausalLM", [2, 3, 4], [2, 3, 4], [3, 4, 5])
    message = str(refused.value)
    assert "DeepseekV3ForCausalLM captures the inputs of layers [2, 3, 4]" in message
    assert "records aux layers [3, 4, 5]" in message


def test_cancel_is_agreed_before_each_batch(tmp_path: Path) -> None:
    ctx = StageContext(work_dir=tmp_path)
    _agree_on_cancel(ctx, Ranks(), torch.device("cpu"))
    ctx.cancel.set()
    with pytest.raises(StageCancelled):
        _agree_on_cancel(ctx, Ranks(), torch.device("cpu"))


# ---- the writing path against the HF backend's own output


class _TargetInSGLangsShape:
    """Stands in for `SGLangTarget` (SGLang's classes need CUDA): the real tiny target, run one unpadded row
    at a time, its states handed back as SGLang hands them, aux concatenated per token and the rows end to
    end."""

    def __init__(self, folder: Path, limits: BatchLimits) -> None:
        self._model = AutoModelForCausalLM.from_pretrained(folder).eval()
        self._limits = limits
        self.batches: list[list[int]] = []

    def limits(self) -> BatchLimits:
        return self._limits

    def capture(self, rows: Any) -> torch.Tensor:
        self.batches.append([len(row) for row in rows])
        aux, last = [], []
        for row in rows:
            layers = [*AUX, len(decoder_of(self._model).layers)]
            with capture_layers(self._model, layers) as captured:
                decoder_of(self._model)(input_ids=torch.tensor([row]), use_cache=False)
            aux.append(torch.cat([captured[i][0] for i in AUX], dim=-1))
            last.append(captured[layers[-1]][0])
        return packed_states(torch.cat(aux), torch.cat(last))


def test_packed_capture_writes_what_the_hf_backend_writes(tmp_path: Path) -> None:
    target = random_target(tmp_path / "target")
    rng = random.Random(0)
    data = write_jsonl(
        tmp_path / "data.jsonl", [chat(rng, turns=1 + i % 3, words=3 + i % 5) for i in range(7)]
    )
    by_hf = tmp_path / "hf"
    values = {"target": str(target), "data": str(data), "max_len": 64, "batch_size": 3, "dtype": "float32"}
    extract.run(StageContext(work_dir=tmp_path), ExtractParams(**values, output=str(by_hf), device="cpu"))
    rows = read_dataset_rows(by_hf)[0]

    packed = tmp_path / "packed"
    (packed / HIDDEN_DIR).mkdir(parents=True)
    pending = pending_samples(packed, rows, 32)
    limits = BatchLimits(max_samples=3, max_tokens=80, max_sample_tokens=64)
    stand_in = _TargetInSGLangsShape(target, limits)
    written: list[Written] = []
    writer = AsyncWriter(packed, threads=2, depth=2)
    with torch.no_grad():
        extract_packed(
            stand_in,
            pack_batches(pending, limits),
            writer=writer,
            device=torch.device("cpu"),
            dtype=torch.float32,
            check_cancelled=lambda: None,
            on_written=written.extend,
        )
    written.extend(writer.close())

    assert len(stand_in.batches) < len(rows)  # several samples shared a forward
    assert sorted(w.index for w in written) == list(range(len(rows)))
    assert sorted(p.name for p in (packed / HIDDEN_DIR).iterdir()) == sorted(
        p.name for p in (by_hf / HIDDEN_DIR).iterdir()
    )
    for index, ids in enumerate(rows):
        assert is_complete(hidden_path(packed, index), len(ids), 32)  # resume takes it as done
        theirs, ours = read_header(hidden_path(by_hf, index)), read_header(hidden_path(packed, index))
        assert theirs is not None
        assert ours is not None
        assert {k: v["dtype"] for k, v in ours.items() if k != "__metadata__"} == {
            k: v["dtype"] for k, v in theirs.items() if k != "__metadata__"
        }
        hf_sample, our_sample = load_sample(by_hf, index), load_sample(packed, index)
        assert torch.equal(our_sample["token_ids"], hf_sample["token_ids"])
        torch.testing.assert_close(
            our_sample["hidden_states"], hf_sample["hidden_states"], rtol=1e-5, atol=1e-5
        )


def test_a_rank_without_a_writer_runs_every_batch_and_writes_nothing(tmp_path: Path) -> None:
    target = random_target(tmp_path / "target")
    limits = BatchLimits(max_samples=2, max_tokens=64, max_sample_tokens=64)
    stand_in = _TargetInSGLangsShape(target, limits)
    batches = pack_batches(_pending(9, 7, 5, 3, 2), limits)
    extract_packed(
        stand_in,
        batches,
        writer=None,
        device=torch.device("cpu"),
        dtype=torch.float32,
        check_cancelled=lambda: None,
        on_written=lambda _: pytest.fail("a rank without a writer reported a write"),
    )
    assert stand_in.batches == [[9, 7], [5, 3], [2]]
    assert not any(tmp_path.glob("**/hs_*.safetensors"))


def test_out_of_memory_names_the_batch(tmp_path: Path) -> None:
    class _OutOfMemory(_TargetInSGLangsShape):
        def capture(self, rows: Any) -> torch.Tensor:
            raise torch.OutOfMemoryError("CUDA out of memory")

    limits = BatchLimits(max_samples=4, max_tokens=64, max_sample_tokens=64)
    with pytest.raises(BatchOutOfMemory) as caught:
        extract_packed(
            _OutOfMemory(random_target(tmp_path / "target"), limits),
            pack_batches(_pending(9, 7), limits),
            writer=None,
            device=torch.device("cpu"),
            dtype=torch.float32,
            check_cancelled=lambda: None,
            on_written=lambda _: None,
        )
    assert (caught.value.batch_size, caught.value.seq_len) == (2, 9)


def test_an_sglang_extraction_is_keyed_apart_from_an_hf_one(tmp_path: Path) -> None:
    target = random_target(tmp_path / "target")
    data = write_jsonl(tmp_path / "data.jsonl", [chat(random.Random(0), turns=1, words=4)])
    values = {"target": str(target), "data": str(data), "output": str(tmp_path / "out")}
    hf = ExtractParams(**values)
    inputs = extract._resolve(StageContext(work_dir=tmp_path), hf)
    assert "backend" not in extract._fingerprint_inputs(hf, inputs)  # earlier hf extractions still resume
    sglang = ExtractParams(**values, backend="sglang")
    assert extract._fingerprint_inputs(sglang, inputs)["backend"] == "sglang"


def test_a_transformers_fallback_class_is_named_as_a_module_that_did_not_import() -> None:
    """SGLang serves an architecture whose own module failed to import (a host without flashinfer loads
    DeepseekV3ForCausalLM so) with its transformers fallback class, which has no capture hook."""
    config = type(
        "ModelConfig", (), {"hf_config": type("HF", (), {"architectures": ["DeepseekV3ForCausalLM"]})}
    )
    said = no_capture_hook("TransformersMoEForCausalLM", config)
    assert "loaded DeepseekV3ForCausalLM as its transformers fallback TransformersMoEForCausalLM" in said
    assert "did not import on this host" in said
    assert "SGLang refuses to serve" in no_capture_hook("MixtralForCausalLM", config)


def test_capture_args_keep_extend_attention_causal() -> None:
    """SGLang's triton backend lets a layer declared DECODER_BIDIRECTIONAL (every Gemma3 layer) attend to
    later tokens of an extend when CUDA graphs are off and `chunked_prefill_size == -1` (0.5.14 and 0.5.23
    alike). Capture runs with graphs off, so its args must keep the other half of that rule false: with -1
    an H200 captured Gemma3 states 0.75-0.99 away (relative L2) from what the causal model computes."""
    import importlib.util
    import inspect

    from sglang.srt.server_args import ServerArgs

    from drafting.ml.sglang_capture import TargetSpec, _server_args

    spec = importlib.util.find_spec("sglang.srt.layers.attention.triton_backend")
    assert spec is not None
    assert spec.origin is not None
    rule = Path(spec.origin).read_text()
    start = rule.index("self.allow_bidirectional_attention_in_extend = (")
    assert "chunked_prefill_size == -1" in rule[start : start + 600]  # the rule as this test reads it
    args = _server_args(TargetSpec(Path("/t"), "bfloat16", AUX, AUX, 1, 0, 0, "triton"))
    assert isinstance(args, ServerArgs)
    assert args.disable_cuda_graph
    assert args.chunked_prefill_size != -1
    assert "chunked_prefill_size" in inspect.signature(ServerArgs).parameters
