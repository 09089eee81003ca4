"""`eyas demo DIR --target smollm2`: a real target, training prompts, MT-Bench and a pipeline spec for them.

The pipeline starts from prompts: `generate` has the target answer the training prompts itself (and write
more user turns of its own, Magpie-style), then extract → train → fix_keys → gpu_check → eval → benchmark.
Training prompts are eyas's built-in plain-text set plus the target's own; MT-Bench is never trained on: it is
cut in two files that share no question (drafting.prompting.split), eight questions (one per category) that
eval and the sweep ask, and the next eight, answered by the target too, as the pipeline's `held_out` set,
which picks the best epoch and gives training's acceptance estimate (a split of the generated data overstates
it).
The pipeline refuses a set used for two of these roles, and generate drops training prompts equal to held-out
ones.

Sized for a 2-core CPU host with the reference engine (docs/real-models.md has the measured time): a few
dozen short conversations, one small drafter, eight MT-Bench questions. The acceptance it reaches is that of
a drafter trained on a few dozen conversations — a real measurement on a real model, not a useful drafter;
the same spec with `engine: sglang` and more prompts is the GPU recipe.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from drafting.prompting.named import resolve_source
from drafting.prompting.split import split_prompt_file
from drafting.realmodels import build_target

EVAL_PROMPTS = 8  # one MT-Bench question per category
HELD_OUT_PROMPTS = 8  # the next one per category: what validates the drafter, never what evaluates it
CPU_TRAIN: dict[str, Any] = {
    "device": "cpu",
    "dtype": "float32",
    "epochs": 3,
    "batch_size": 4,
    "max_len": 256,
    "draft_vocab_size": 8192,
    "lr": 3e-3,
    "warmup_steps": 0,
    "init_lm_head": "target",
    "ttt_steps": 3,
    "loader_workers": 0,
}


def write_real_demo(
    folder: Path,
    *,
    target: str = "smollm2",
    gguf: Path | None = None,
    held_out: int = HELD_OUT_PROMPTS,
    eval_prompts: int = EVAL_PROMPTS,
) -> dict[str, str]:
    """The built target (cached), training prompts and MT-Bench under `folder` (`held_out` questions of it
    as the validation set); returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    built = build_target(target, folder / "target", gguf=gguf)
    train_prompts = folder / "train_prompts.jsonl"
    shutil.copyfile(resolve_source("default"), train_prompts)
    evaluated, validated = split_prompt_file(
        resolve_source("mtbench"),
        eval_prompts,
        held_out,
        folder / "mtbench_eval.jsonl",
        folder / "mtbench_held_out.jsonl",
    )
    return {
        "target": str(built.folder),
        "train_prompts": str(train_prompts),
        "prompts": str(evaluated),
        "held_out_prompts": str(validated),
        "built": "yes" if built.built else "cached",
    }


def real_pipeline_spec(
    assets: dict[str, str],
    *,
    workdir: str,
    self_prompts: int = 16,
    eval_prompts: int = EVAL_PROMPTS,
    draft_vocab_size: int | None = None,
) -> dict[str, Any]:
    """An eagle3 pipeline from prompts over a real target, on the CPU (the reference engine); with
    `held_out_prompts` among the assets, a held-out validation set made from them."""
    engine = {"engine": "reference"}
    generate = {
        "prompts": assets["train_prompts"],
        # task openers: on the H200 they raised held-out MT-Bench first-token accuracy 0.509 -> 0.594 against
        # the target's prefix alone (docs/generate.md, Openers)
        "self_prompts": {
            "count": self_prompts,
            "max_new_tokens": 48,
            "min_chars": 12,
            "max_chars": 400,
            "openers": "tasks",
        },
        "max_new_tokens": 128,
        "temperature": 0.0,  # the drafter is evaluated on greedy decoding: learn the target's greedy answers
        "concurrency": 2,
        "engine": engine,
    }
    spec: dict[str, Any] = {
        "template": "eagle3",
        "target": assets["target"],
        "generate": generate,
        "workdir": workdir,
        "extract": {"device": "cpu", "dtype": "float32", "max_len": 256, "batch_size": 4},
        "train": {**CPU_TRAIN, **_vocab(draft_vocab_size)},
        "eval": {
            "device": "cpu",
            "depths": [3, 5],
            "prompts": assets["prompts"],
            "max_prompts": eval_prompts,
            "max_new_tokens": 48,
        },
        "benchmark": {
            "depths": [3],
            "prompts": assets["prompts"],
            "max_prompts": 4,
            "max_new_tokens": 32,
            "repeats": 2,
            "warmup_requests": 0,
            # the CPU reference engine re-drafts without a KV cache: slower than plain decoding whatever the
            # acceptance, so no speedup is asked for here (keep 1.0 with SGLang on a GPU)
            "speedup_threshold": 0.0,
            "launch": dict(engine),
        },
    }
    if "held_out_prompts" in assets:
        spec["held_out"] = {"prompts": assets["held_out_prompts"]}
    return spec


# The GPU recipe (docs/real-models.md), measured on one H200 with SGLang 0.5.14, CUDA graphs on. 16,000
# self-prompted conversations with task openers, greedy answers of up to 384 tokens, lr 1e-3 for
# 10 epochs: generate + extract + train in 19.8 minutes, served at accept length 3.04 on 72 MT-Bench
# questions at (5,1,6) (2.63 on the sweep's 8, decoded past their end of turn); 12,000 served 2.94 there.
GPU_HELD_OUT_PROMPTS = 72  # the next nine per category of MT-Bench's 80, after the 8 eval questions
GPU_CONFIGS = [
    {"steps": 5, "topk": 1, "draft_tokens": 6},  # the chain every run reports
    {"steps": 5, "topk": 4, "draft_tokens": 8},  # the tree: 3.06 from 12,000 conversations (3.32 held out)
]
ANSWER_TOKENS = 384  # SmolLM2-135M loops under greedy decoding: half of 512-token answers hit the limit
SWEEP_TOKENS = 192


def gpu_pipeline_spec(
    assets: dict[str, str],
    *,
    workdir: str,
    conversations: int = 16000,
    epochs: int = 10,
    lr: float = 1e-3,
    openers: str | None = "tasks",
    truncated_answers: str = "keep",
    eval_step: bool = False,
    configs: list[dict[str, int]] | None = None,
    repeats: int = 3,
    sglang_args: list[str] | None = None,
    draft_vocab_size: int | None = None,
    sweep: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An eagle3 pipeline from prompts the target writes itself, on a GPU host with SGLang. `sglang_args`
    go to every SGLang launch (a wheel set without flashinfer needs triton attention and pytorch sampling).
    eval is left out unless asked (`eval_step`): on the GPU it decodes the sweep's requests again, about
    3.5 minutes, and the sweep measures what eval predicts (within 2 %,
    docs/design/eval-predicts-serving.md). `sweep`: benchmark fields that replace the recipe's (a target's
    own configs, concurrencies, prompts)."""
    extra = list(sglang_args or [])
    self_prompts: dict[str, Any] = {"count": conversations, "temperature": 1.0, "max_new_tokens": 160}
    if openers:
        self_prompts["openers"] = openers
    spec: dict[str, Any] = {
        "template": "eagle3",
        "target": assets["target"],
        "workdir": workdir,
        "generate": {
            "self_prompts": self_prompts,
            "temperature": 0.0,  # the drafter serves greedy decoding: learn the target's greedy answers
            "max_new_tokens": ANSWER_TOKENS,
            "truncated_answers": truncated_answers,
            "concurrency": 256,  # on one H200: 247 requests in flight, 18.1 k tok/s
            "multi_turn": False,
            "engine": {"engine": "sglang", "mem_fraction_static": 0.6, "extra_args": extra},
        },
        "extract": {"device": "cuda", "max_len": 1024, "batch_size": 64},
        "train": {
            "device": "cuda",
            "epochs": epochs,
            "batch_size": 32,
            "max_len": 1024,
            "lr": lr,
            "ttt_steps": 7,
            **_vocab(draft_vocab_size),
        },
        "eval": None,
        "benchmark": {
            "configs": configs or GPU_CONFIGS,
            "prompts": assets["prompts"],
            "max_prompts": EVAL_PROMPTS,
            "max_new_tokens": SWEEP_TOKENS,
            "repeats": repeats,
            "launch": {"engine": "sglang", "mem_fraction_static": 0.35, "extra_args": extra},
            **(sweep or {}),
        },
    }
    if eval_step:
        spec["eval"] = {
            "device": "cuda", "depths": [3, 5, 7], "prompts": assets["prompts"], "max_prompts": EVAL_PROMPTS,
            "max_new_tokens": SWEEP_TOKENS,
        }  # fmt: skip
    if "held_out_prompts" in assets:
        # served too (serve_held_out): SGLang on the prompts train's estimate walks (within 1.1-1.8 %,
        # docs/design/checkpoint-choice.md)
        spec["held_out"] = {"prompts": assets["held_out_prompts"], "serve": True}
    return spec


# Qwen2.5-Coder-1.5B's GPU sweep: chains of depth 3, 5 and 7 and a tree, each at 1, 8 and 32 requests in
# flight, over 32 MT-Bench questions (four per category): 32 in flight need 32 requests at once, and the
# paired speedup's interval resamples requests (32 narrow it where 8 cannot). The other 48 questions are
# the held-out set that picks the checkpoint; none is trained on.
QWEN_GPU_EVAL_PROMPTS = 32
QWEN_GPU_SWEEP: dict[str, Any] = {
    "configs": [
        {"steps": 3, "topk": 1, "draft_tokens": 4},
        {"steps": 5, "topk": 1, "draft_tokens": 6},
        {"steps": 7, "topk": 1, "draft_tokens": 8},
        {"steps": 5, "topk": 4, "draft_tokens": 8},
    ],
    "concurrencies": [1, 8, 32],
    "max_prompts": QWEN_GPU_EVAL_PROMPTS,
    "repeats": 2,
}
# Per target, for the GPU recipe: its sweep, and how MT-Bench's 80 questions are cut (sweep, held out).
DEMO_TARGET_OPTIONS: dict[str, dict[str, Any]] = {
    "qwen2.5-coder-1.5b": {"sweep": QWEN_GPU_SWEEP, "eval_prompts": QWEN_GPU_EVAL_PROMPTS, "held_out": 48}
}


def demo_prompt_counts(target: str, gpu: bool) -> tuple[int, int]:
    """(questions the sweep asks, held-out questions) of MT-Bench for the demo of `target`."""
    if not gpu:
        return EVAL_PROMPTS, HELD_OUT_PROMPTS
    options = DEMO_TARGET_OPTIONS.get(target, {})
    return options.get("eval_prompts", EVAL_PROMPTS), options.get("held_out", GPU_HELD_OUT_PROMPTS)


def demo_pipeline_spec(target: str, assets: dict[str, str], *, workdir: str, gpu: bool) -> dict[str, Any]:
    """The demo's pipeline for a real target: the GPU recipe or the CPU one, with the target's draft
    vocabulary (drafting.realmodels.REAL_TARGETS) and, on the GPU, its own sweep where it has one."""
    from drafting.realmodels import REAL_TARGETS

    vocab = REAL_TARGETS[target].draft_vocab_size
    if not gpu:
        return real_pipeline_spec(assets, workdir=workdir, draft_vocab_size=vocab)
    sweep = DEMO_TARGET_OPTIONS.get(target, {}).get("sweep")
    return gpu_pipeline_spec(assets, workdir=workdir, draft_vocab_size=vocab, sweep=sweep)


def _vocab(draft_vocab_size: int | None) -> dict[str, int]:
    return {} if draft_vocab_size is None else {"draft_vocab_size": draft_vocab_size}
