"""The journey on a target of the test zoo (testsupport/target_zoo.py) on a GPU host with SGLang, through
eyas's own API: one `POST /v1/pipelines` — the target answers prompts of its own vocabulary (generate on
SGLang) → extract (the hf or the sglang backend) → train → fix_keys → gpu_check → eval → a sweep on real
SGLang with CUDA graphs on against a no-speculation baseline — followed to its end.

The zoo's architectures are the ones users serve (Qwen3-MoE, DeepSeek-V3, Gemma3, GPT-OSS, the Kimi-K2.5
wrapper…) with random weights at hidden 256 (`SGLANG_SIZES`) and a planted next-token rule a draft can learn
(`planted=True`: each word followed by the next id, or repeated where the head is tied), so the figures are
not quality claims: the run shows that a draft trained on the captured states is served by SGLang's class
for that architecture at the acceptance eval predicted (a capture that differs from what serving hands the
draft shows as a gap between the two); no speedup is required of a target this small. Writes
OUT/pipeline.json, OUT/job_logs.txt and OUT/serving.json, and prints train's, eval's and SGLang's accept
length by depth.

    python -m bench.journey_zoo WORK OUT --zoo qwen3_moe [--backend sglang] [--conversations 2000]
        [--epochs 4] [--depths 3,5] [--sglang-args="--attention-backend triton --sampling-backend pytorch"]
    python -m bench.journey_zoo WORK OUT --zoo qwen3_moe --device cpu --engine reference   # without a GPU
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
from pathlib import Path
from typing import Any

from bench import _cli as cli
from bench._journey_api import connected, follow_pipeline, posted, write_report
from cli.demo.constructed import WORDS, chat_prompt, write_jsonl
from drafting.sglang_facts import SGLANG_VERSION_ON_GPU_HOST
from testsupport import target_zoo


def prompts(path: Path, count: int, seed: int) -> Path:
    """`count` chat prompts of the zoo tokenizer's words (anything else is one unknown token to it)."""
    rng = random.Random(seed)
    return write_jsonl(path, [chat_prompt(" ".join(rng.choices(WORDS, k=12))) for _ in range(count)])


def spec(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The pipeline on WORK's target and prompts, with the journey's flags."""
    depths = [int(d) for d in args.depths.split(",")]
    launch: dict[str, Any] = {"engine": args.engine}
    if args.engine == "sglang":
        launch.update({"mem_fraction_static": 0.4, "extra_args": shlex.split(args.sglang_args)})
    asked = {"prompts": str(work / "eval_prompts.jsonl"), "max_prompts": 16, "max_new_tokens": 96}
    return {
        "template": "eagle3",
        "target": str(work / "target"),
        "workdir": str(work / "runs"),
        "host": args.host,
        "generate": {
            "prompts": str(work / "prompts.jsonl"),
            "temperature": 0.0,  # the drafter serves greedy decoding: learn the target's greedy answers
            "max_new_tokens": 96,
            "concurrency": 256 if args.engine == "sglang" else 4,
            "engine": launch,
        },
        "extract": {"backend": args.backend, "device": args.device, "max_len": 256, "batch_size": 32},
        "train": {
            "device": args.device,
            "epochs": args.epochs,
            "batch_size": 16,
            "max_len": 256,
            "lr": 1e-3,
            "draft_vocab_size": target_zoo.VOCAB,
            "ttt_steps": 7,
        },
        # extract captures for the release fix_keys names (the eagle3 template passes it on)
        "fix_keys": {"sglang_version": SGLANG_VERSION_ON_GPU_HOST},
        "eval": {"device": args.device, "depths": depths, **asked},
        "benchmark": {"depths": depths, "launch": launch, "speedup_threshold": 0.0, **asked},
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = cli.parser(__doc__)
    parser.add_argument("work", type=Path, help="the target, prompts, eyas's data and runs go here")
    parser.add_argument("out", type=Path, help="where the report goes")
    parser.add_argument("--zoo", required=True, choices=sorted(target_zoo.SERVED), help="the architecture")
    parser.add_argument("--backend", default="hf", choices=("hf", "sglang"), help="extract's backend")
    parser.add_argument("--conversations", type=int, default=2000, help="prompts the target answers")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--depths", default="3,5")
    parser.add_argument("--host", default="gpu", help="the host's name in eyas")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run on a CPU machine")
    parser.add_argument("--engine", default="sglang", help="reference: a dry run without SGLang")
    parser.add_argument(
        "--sglang-args", default="", help='extra arguments of every SGLang launch (--sglang-args="--x y")'
    )
    return parser.parse_args(argv)


def accept_lengths(pipeline: dict[str, Any]) -> list[dict[str, Any]]:
    """Train's, eval's and the engine's accept length by depth, with the errors against the engine's (the
    pipeline's acceptance view)."""
    return list((pipeline.get("acceptance") or {}).get("by_depth") or [])


def main() -> None:
    args = parse()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    target_zoo.build(args.zoo, work / "target", sizes=target_zoo.SGLANG_SIZES, planted=True)
    prompts(work / "prompts.jsonl", args.conversations, seed=0)
    prompts(work / "eval_prompts.jsonl", 16, seed=1)
    with connected(work, args.out, host=args.host, url=None, token_file=None) as http:
        created = posted(http, "/v1/pipelines", spec(work, args))
        ended = follow_pipeline(http, created["id"])
        write_report(http, ended, args.out)
    print(json.dumps({"zoo": args.zoo, "backend": args.backend, "by_depth": accept_lengths(ended)}, indent=2))
    sys.exit(0 if ended["state"] == "succeeded" else 1)


if __name__ == "__main__":
    main()
