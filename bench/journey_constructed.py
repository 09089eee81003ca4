"""The whole journey on a GPU host with a constructed target, driven through eyas's own API: `eyas up` for
the command's length, then one `POST /v1/pipelines` (extract → train → fix_keys → gpu_check → [eval →]
a benchmark sweep with real SGLang, CUDA graphs on, against a no-speculation baseline), followed to its end;
then launch dry runs through `POST /v1/launch/render` on this host (real NVML, SGLang's own parser).

The target is a constructed Llama of the given width and depth whose greedy next token is a fixed successor
of the current one, so a drafter can learn it and acceptance shows whether every weight was loaded: its
figures are plumbing and speed (at a 7B shape the decode step is memory-bound as a real 7B's is), not
quality claims. Writes OUT/pipeline.json, OUT/job_logs.txt, OUT/serving.json and OUT/dry_runs.json.

    python -m bench.journey_constructed WORK OUT [--hidden 4096 --layers 32] [--depths 16,10,5]
        [--graph-max-bs 4] [--epochs 2] [--lr 3e-4] [--no-eval] [--sglang-args="--attention-backend triton"]
    python -m bench.journey_constructed WORK OUT --device cpu --engine reference   # a dry run without a GPU
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import shlex
import sys
from pathlib import Path
from typing import Any

import httpx
import torch

from bench import _cli as cli
from bench._journey_api import connected, follow_pipeline, posted, write_report
from cli.demo.constructed import WORDS, successor_target, write_jsonl
from testsupport.successor_chats import successor_chat


def prompts(path: Path, count: int = 16) -> Path:
    rng = random.Random(7)
    lines = [{"text": " ".join(rng.choice(WORDS) for _ in range(12))} for _ in range(count)]
    return write_jsonl(path, lines)


def spec(
    work: Path,
    depths: list[int],
    *,
    host: str = "gpu",
    device: str = "cuda",
    engine: str = "sglang",
    graph_max_bs: int | None = None,
    epochs: int = 2,
    lr: float = 3e-4,
    eval_step: bool = True,
    sglang_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The pipeline on WORK's target, conversations and prompts."""
    launch: dict[str, Any] = {"engine": engine}
    if engine == "sglang":
        graphs = ["--cuda-graph-max-bs", str(graph_max_bs)] if graph_max_bs else []
        launch.update({"mem_fraction_static": 0.5, "extra_args": [*sglang_args, *graphs]})
    body: dict[str, Any] = {
        "template": "eagle3",
        "target": str(work / "target"),
        "data": str(work / "chats.jsonl"),
        "workdir": str(work / "runs"),
        "host": host,
        "extract": {"device": device, "max_len": 256, "batch_size": 16},
        "train": {
            "device": device,
            "epochs": epochs,
            "batch_size": 8,
            "max_len": 256,
            "draft_vocab_size": 64,
            "lr": lr,
            "init_lm_head": "random",
            "ttt_steps": 7,
        },
        "fix_keys": {"sglang_version": "0.5.14"},
        "eval": {
            "device": device,
            "depths": depths,
            "prompts": str(work / "prompts.jsonl"),
            "max_prompts": 8,
            "max_new_tokens": 128,
        },
        "benchmark": {
            "depths": depths,
            "prompts": str(work / "prompts.jsonl"),
            "max_prompts": 8,
            "max_new_tokens": 128,
            "launch": launch,
        },
    }
    if not eval_step:  # null skips it (absent, the template adds it with its defaults)
        body["eval"] = None
    return body


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = cli.parser(__doc__)
    parser.add_argument("work", type=Path, help="the target, data, prompts, eyas's data and runs go here")
    parser.add_argument("out", type=Path, help="where the report goes")
    parser.add_argument("--depths", default="16,10,5")
    parser.add_argument("--host", default="gpu", help="the host's name in eyas")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of this module on a CPU machine")
    parser.add_argument("--engine", default="sglang", help="reference: a dry run without SGLang")
    parser.add_argument("--hidden", type=int, default=1024, help="a multiple of 256 (heads of 64)")
    parser.add_argument(
        "--layers", type=int, default=8, help="more and wider: less launch-bound, as real 7B+"
    )
    parser.add_argument(
        "--graph-max-bs",
        type=int,
        help="capture CUDA graphs up to this batch size only (the sweep runs one request at a time): "
        "each launch of a 7B shape captures in seconds instead of a minute; graphs stay on",
    )
    parser.add_argument("--epochs", type=int, default=2, help="a 7B shape learns the rule more slowly")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--no-eval", action="store_true", help="a pipeline without the eval step")
    parser.add_argument(
        "--sglang-args", default="", help='extra arguments of every SGLang launch (--sglang-args="--x y")'
    )
    return parser.parse_args(argv)


def build_assets(args: argparse.Namespace, work: Path) -> None:
    """WORK/target (bf16, built in a child process: its CUDA memory goes with it, so eyas's GPU gate finds
    the GPU clean), WORK/chats.jsonl and WORK/prompts.jsonl."""
    heads = args.hidden // 64  # Llama's head size; 4 query heads per KV head, an MLP 2.75 times as wide
    build = multiprocessing.get_context("spawn").Process(
        target=successor_target, args=(work / "target",),
        kwargs={"hidden": args.hidden, "heads": heads, "kv_heads": heads // 4, "layers": args.layers,
                "intermediate": round(2.75 * args.hidden / 128) * 128, "dtype": torch.bfloat16,
                "device": args.device},
    )  # fmt: skip
    build.start()
    build.join()
    if build.exitcode != 0:
        raise SystemExit(f"building the target failed (exit {build.exitcode})")
    rng = random.Random(0)
    write_jsonl(work / "chats.jsonl", [successor_chat(rng) for _ in range(400)])
    prompts(work / "prompts.jsonl")


def main() -> None:
    args = parse()
    work, out = args.work.resolve(), args.out
    work.mkdir(parents=True, exist_ok=True)
    build_assets(args, work)
    extra = tuple(shlex.split(args.sglang_args))
    pipeline = spec(
        work, [int(d) for d in args.depths.split(",")], host=args.host, device=args.device,
        engine=args.engine, graph_max_bs=args.graph_max_bs, epochs=args.epochs, lr=args.lr,
        eval_step=not args.no_eval, sglang_args=extra,
    )  # fmt: skip
    with connected(work, out, host=args.host, url=None, token_file=None) as http:
        print("hosts:", json.dumps(http.get("/v1/hosts").json()[0]["gpus"])[:400], flush=True)
        created = posted(http, "/v1/pipelines", pipeline)
        ended = follow_pipeline(http, created["id"])
        write_report(http, ended, out)
        dry_runs(http, pipeline, out, extra)
    sys.exit(0 if ended["state"] == "succeeded" else 1)


def dry_runs(http: httpx.Client, pipeline_spec: dict[str, Any], out: Path, extra: tuple[str, ...]) -> None:
    """POST /v1/launch/render on this host: a good spec, tp_size past the GPUs, tp_size that does not split
    the heads, and --help in extra_args."""
    drafts = http.get("/v1/artifacts", params={"kind": "sglang_checkpoint"}).json()["items"]
    base = {
        "engine": "sglang",
        "model": pipeline_spec["target"],
        "draft": drafts[0]["path"] if drafts else pipeline_spec["target"],
        "depth": 5,
        "extra_args": list(extra),
    }
    cases = {
        "good": base,
        "tp_2_on_1_gpu": {**base, "tp_size": 2},
        "tp_3_heads_16": {**base, "tp_size": 3},
        "help_flag": {**base, "extra_args": [*extra, "--help"]},
    }
    results = {}
    for name, launch in cases.items():
        answer = http.post("/v1/launch/render", json={"host": pipeline_spec["host"], "spec": launch})
        body = answer.json()
        findings = (
            [f"{f['severity']} {f['code']}" for f in body.get("findings", [])] if answer.is_success else []
        )
        results[name] = {"status": answer.status_code, "ok": body.get("ok"), "findings": findings}
        if not answer.is_success:
            results[name]["detail"] = str(body.get("detail") or body)[:300]
    (out / "dry_runs.json").write_text(json.dumps(results, indent=2))
    print("dry runs:", json.dumps(results, indent=1), flush=True)


if __name__ == "__main__":
    main()
