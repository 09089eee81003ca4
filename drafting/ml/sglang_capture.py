"""The target run by SGLang's own model classes, capturing what SGLang's EAGLE-3 serving path hands the draft.

The one module that imports sglang. It calls SGLang 0.5.14's in-process API the way that release's own offline
benchmark does (`sglang/bench_one_batch.py`: `load_model`, `extend`), on each tensor-parallel rank:

* a `ModelRunner` over the process group the rank has already joined (`init_distributed_environment` in
  `srt/distributed/parallel_state.py` keeps an initialised default group as SGLang's world);
* `set_eagle3_layers_to_capture(ids)` with the ids the draft config will carry: the call
  `ModelRunner.init_aux_hidden_state_capture` makes when SGLang serves an EAGLE-3 draft;
* one extend forward per batch (`ScheduleBatch.init_new` + `prepare_for_extend`, a `ChunkCache`: no prefix
  reuse) with `CaptureHiddenMode.FULL`, so the logits processor returns every token's aux states
  concatenated (`srt/layers/logits_processor.py` `_get_hidden_states_to_store`): the tensor the draft's `fc`
  reads when it is served.

The last state. The logits processor is handed the text model's *post*-norm output; the HF backend stores
the residual stream *before* the final norm (the trainer applies the target's own norm and head), and a norm
cannot be undone (RMSNorm drops each token's scale). So a pre-hook on the final norm keeps its input instead:
`hidden_states + residual` where SGLang's class fuses the last residual add into the norm, else
`hidden_states`. Under tensor parallelism that input is whole on every rank, like the aux states: the last
layer's all-reduce is never fused into the final norm (`srt/layers/communicator.py`
`should_fuse_mlp_allreduce_with_next_layer` is false for the last layer).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from drafting.ml.sglang_extraction import BatchLimits, CaptureRefused, packed_states
from drafting.sglang_facts import SGLANG_VERSION_ON_GPU_HOST

# The release whose internals (ModelRunner, ScheduleBatch, ForwardBatch) this module calls; checked before any
# rank starts (drafting/stages/_extract_sglang.py).
CAPTURE_RELEASE = SGLANG_VERSION_ON_GPU_HOST


CAPTURE_CHUNKED_PREFILL_SIZE = 1 << 16


@dataclass(frozen=True)
class TargetSpec:
    folder: Path
    dtype: str  # bfloat16 | float16 | float32, SGLang's spelling too
    sglang_aux_ids: list[int]  # the draft config's eagle_aux_hidden_state_layer_ids
    aux_layers: list[int]  # the layers whose input the extraction records (HF hidden-state indices)
    tp_size: int
    tp_rank: int
    gpu_id: int
    attention_backend: str | None = None
    mem_fraction_static: float | None = None


class SGLangTarget:
    """One tensor-parallel rank of the target in SGLang; `capture` is collective (every rank, same rows)."""

    def __init__(self, spec: TargetSpec) -> None:
        self._runner = _model_runner(spec)
        model = self._runner.model
        if not callable(getattr(model, "set_eagle3_layers_to_capture", None)):
            raise CaptureRefused(no_capture_hook(type(model).__name__, self._runner.model_config))
        model.set_eagle3_layers_to_capture(list(spec.sglang_aux_ids))
        text_model, points = _capturing_text_model(model)
        check_capture_points(type(model).__name__, points, spec.sglang_aux_ids, spec.aux_layers)
        self._last = FinalNormInput(_final_norm(model, text_model))
        # Before the eager runner's warm-up (init_cuda_graphs), as SGLang orders it when serving.
        self._runner.init_attention_backends()
        self._runner.init_cuda_graphs()
        self._cache = _chunk_cache(self._runner)

    def limits(self) -> BatchLimits:
        runner = self._runner
        pool = runner.max_total_num_tokens
        if runner.is_hybrid_swa:  # a prefill holds every token in the sliding-window pool too
            pool = min(pool, runner.swa_max_total_num_tokens)
        return BatchLimits(
            max_samples=runner.req_to_token_pool.size,
            max_tokens=min(runner.server_args.max_prefill_tokens, pool),
            max_sample_tokens=min(
                pool, runner.model_config.context_len, runner.req_to_token_pool.max_context_len
            ),
        )

    def capture(self, rows: Sequence[Sequence[int]]) -> torch.Tensor:
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch

        runner = self._runner
        batch = self._extend_batch(rows)
        self._last.clear()
        try:
            batch.prepare_for_extend()
            if batch.input_ids is None and getattr(batch, "prefill_input_ids_cpu", None) is not None:
                # prepare_for_extend leaves the ids on the host for the scheduler's stream to move.
                batch.input_ids = batch.prefill_input_ids_cpu.to(batch.device, non_blocking=True)
                batch.prefill_input_ids_cpu = None
            batch.capture_hidden_mode = CaptureHiddenMode.FULL
            output = runner.forward(ForwardBatch.init_new(batch, runner)).logits_output
        finally:
            runner.req_to_token_pool.clear()
            runner.token_to_kv_pool_allocator.clear()
        if output.hidden_states is None:
            raise CaptureRefused("SGLang returned no hidden states for a FULL capture")
        return packed_states(output.hidden_states, self._last.take())

    def close(self) -> None:
        """Release SGLang's model-parallel groups; the rank's own process group stays for the final sums."""
        from sglang.srt.distributed.parallel_state import destroy_model_parallel

        self._last.remove()
        destroy_model_parallel()

    def _extend_batch(self, rows: Sequence[Sequence[int]]) -> Any:
        from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        reqs = []
        for i, ids in enumerate(rows):
            req = Req(
                rid=str(i),
                origin_input_text="",
                origin_input_ids=array("q", ids),
                sampling_params=SamplingParams(temperature=0, max_new_tokens=1),
            )
            # What a request admitted whole (no chunking, no cached prefix) carries (bench_one_batch.py).
            req.full_untruncated_fill_ids = req.origin_input_ids
            req.fill_len = len(req.full_untruncated_fill_ids)
            req.logprob_start_len = -1
            req.set_extend_input_len(req.fill_len - len(req.prefix_indices))
            reqs.append(req)
        runner = self._runner
        return ScheduleBatch.init_new(
            reqs=reqs,
            req_to_token_pool=runner.req_to_token_pool,
            token_to_kv_pool_allocator=runner.token_to_kv_pool_allocator,
            tree_cache=self._cache,
            model_config=runner.model_config,
            enable_overlap=False,
            spec_algorithm=SpeculativeAlgorithm.NONE,
        )


def no_capture_hook(class_name: str, model_config: Any) -> str:
    """Why there is nothing to capture. SGLang serves an architecture whose own module failed to import (a
    kernel package missing on the host: it logs "Ignore import error when loading sglang.srt.models.…") with
    its transformers fallback class, which has no capture hook, though the release's sources have one."""
    names = getattr(getattr(model_config, "hf_config", None), "architectures", None) or []
    if class_name.startswith("Transformers") and names:
        return (
            f"SGLang {CAPTURE_RELEASE} loaded {names[0]} as its transformers fallback {class_name}, which "
            "has no set_eagle3_layers_to_capture: SGLang's own module for it did not import on this host "
            "(its log names the missing package after 'Ignore import error when loading "
            "sglang.srt.models'); install that package, or extract with backend hf"
        )
    return (
        f"SGLang {CAPTURE_RELEASE}'s {class_name} has no set_eagle3_layers_to_capture: SGLang refuses to "
        "serve an EAGLE-3 draft for this target, so there is nothing to capture"
    )


class FinalNormInput:
    """What the final norm normalises, kept by a pre-hook: its input plus what it adds first, the residual and
    any extra addition, as SGLang's `RMSNorm.forward_cuda(x, residual, post_residual_addition)` takes them
    (`srt/layers/layernorm.py`)."""

    _NAMES = ("x", "residual", "post_residual_addition")

    def __init__(self, norm: nn.Module) -> None:
        self._kept: list[torch.Tensor] = []
        self._handle = norm.register_forward_pre_hook(self._keep, with_kwargs=True)

    def clear(self) -> None:
        self._kept.clear()

    def take(self) -> torch.Tensor:
        """The one forward's [tokens, T] pre-norm state."""
        if len(self._kept) != 1:
            raise CaptureRefused(f"the final norm ran {len(self._kept)} times in one forward, not once")
        return self._kept.pop()

    def remove(self) -> None:
        self._handle.remove()

    def _keep(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:  # noqa: ARG002 - torch's pre-hook signature
        given: list[Any] = [*args[:3], *(kwargs.get(name) for name in self._NAMES[len(args[:3]) :])]
        x, residual, extra = given
        x = x if x is not None else kwargs.get("hidden_states")
        if x is None:
            raise CaptureRefused("the final norm was called without an input")
        # Summed now, before the norm runs (its fused kernel overwrites x and residual in place), in the order
        # it sums them: the extra addition joins the residual first.
        if residual is None:
            self._kept.append(x.clone())
            return
        if extra is not None:
            residual = residual + extra
        self._kept.append(x + residual)


def _server_args(spec: TargetSpec) -> Any:
    from sglang.srt.server_args import ServerArgs

    options: dict[str, Any] = {
        "model_path": str(spec.folder),
        "skip_tokenizer_init": True,  # eyas tokenized the samples with the chat template
        "dtype": spec.dtype,
        "tp_size": spec.tp_size,
        "enable_return_hidden_states": True,
        # Graph replay runs no Python hooks (ModelRunner.init_cuda_graphs says so), and the final-norm hook
        # must run; extraction does only extend forwards, whose graphs pay off little.
        "disable_cuda_graph": True,
        # Positive, though eyas hands each sample whole to one extend forward and no scheduler chunks it:
        # SGLang's triton backend lets Gemma3's layers (declared DECODER_BIDIRECTIONAL) attend to later
        # tokens in an extend when graphs are off and this is -1, so -1 captured states no causal server
        # computes (docs/design/extract-sglang-causal.md).
        "chunked_prefill_size": CAPTURE_CHUNKED_PREFILL_SIZE,
        "disable_radix_cache": True,
        "sampling_backend": "pytorch",  # nothing is sampled; this one needs no flashinfer
        "grammar_backend": "none",
    }
    if spec.attention_backend is not None:
        options["attention_backend"] = spec.attention_backend
    if spec.mem_fraction_static is not None:
        options["mem_fraction_static"] = spec.mem_fraction_static
    return ServerArgs(**options)


def _model_runner(spec: TargetSpec) -> Any:
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.layers.moe import initialize_moe_config
    from sglang.srt.layers.quantization.fp4_utils import initialize_fp4_gemm_config
    from sglang.srt.layers.quantization.fp8_utils import initialize_fp8_gemm_config
    from sglang.srt.model_executor.model_runner import ModelRunner

    server_args = _server_args(spec)
    # What SGLang's scheduler sets up before its model worker (managers/scheduler.py init_moe_gemm_config).
    initialize_moe_config(server_args)
    initialize_fp8_gemm_config(server_args)
    initialize_fp4_gemm_config(server_args)
    runner = ModelRunner(
        model_config=ModelConfig.from_server_args(server_args),
        mem_fraction_static=server_args.mem_fraction_static,
        gpu_id=spec.gpu_id,
        tp_rank=spec.tp_rank,
        tp_size=spec.tp_size,
        moe_ep_rank=spec.tp_rank // (spec.tp_size // server_args.ep_size),
        moe_ep_size=server_args.ep_size,
        pp_rank=0,
        pp_size=1,
        nccl_port=0,  # unused: the rank's process group exists, so SGLang opens no rendezvous of its own
        server_args=server_args,
    )
    runner.alloc_memory_pool()
    return runner


def _capturing_text_model(model: nn.Module) -> tuple[nn.Module, list[int]]:
    """The module `set_eagle3_layers_to_capture` configured (the text model whose forward loop captures), and
    its capture points."""
    found = [(m, getattr(m, "layers_to_capture", None)) for m in model.modules()]
    capturing = [(m, [int(i) for i in points]) for m, points in found if points]
    if len(capturing) != 1:
        raise CaptureRefused(
            f"eyas finds {len(capturing)} modules with capture points in SGLang's {type(model).__name__}, "
            "not one"
        )
    return capturing[0]


def check_capture_points(
    class_name: str, points: list[int], sglang_ids: list[int], aux_layers: list[int]
) -> None:
    """SGLang's classes capture the input of layer i for i in `layers_to_capture`: those must be the layers
    the extraction records, or the draft would be trained on other states than it is served with."""
    captured, recorded = sorted(points), sorted(aux_layers)
    if captured != recorded:
        raise CaptureRefused(
            f"SGLang {CAPTURE_RELEASE}'s {class_name} captures the inputs of layers {captured} for "
            f"eagle_aux_hidden_state_layer_ids {sglang_ids}, but this extraction records aux layers "
            f"{recorded}: the draft would be served other states than it was trained on"
        )


def _final_norm(model: nn.Module, text_model: nn.Module) -> nn.Module:
    norm = getattr(text_model, "norm", None)
    if not isinstance(norm, nn.Module):
        raise CaptureRefused(f"SGLang's {type(model).__name__} has no final `norm` on its text model")
    return norm


def _chunk_cache(runner: Any) -> Any:
    """SGLang's cache without prefix reuse: what its scheduler builds with the radix cache off
    (`srt/mem_cache/registry.py` default_radix_cache_factory)."""
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.chunk_cache import ChunkCache, SWAChunkCache

    params = CacheInitParams(
        disable=True,
        req_to_token_pool=runner.req_to_token_pool,
        token_to_kv_pool_allocator=runner.token_to_kv_pool_allocator,
        page_size=runner.page_size,
        sliding_window_size=runner.sliding_window_size if runner.is_hybrid_swa else None,
    )
    return SWAChunkCache(params) if runner.is_hybrid_swa else ChunkCache(params)
