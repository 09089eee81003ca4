"""The real-model journey on a GPU host where eyas and SGLang are installed, driven through eyas's API.

`run` posts one eagle3 pipeline for a real target (an HF folder, or SmolLM2-135M-Instruct built from its
GGUF or its PyPI package) and follows it to its end: the target writes and answers its own training
conversations (or `--data` gives them), extract, train, fix_keys, gpu_check, [eval,] serve_held_out on
held-out MT-Bench questions, then a sweep of chain and tree configs against a no-speculation baseline with
CUDA graphs on (the GPU recipe of `eyas demo --gpu`, cli/demo/real.py). It writes
OUT/pipeline.json, OUT/job_logs.txt, OUT/serving.json and OUT/train_params.json, and exits 1 unless the
pipeline succeeded.

`sweep` serves another draft (a reference trainer's, a recipe variant's) through the pipeline's own sweep,
or with `--held-out` its serve_held_out step: the same configs, prompts, budget and launch, as a benchmark
job; `eyas compare A B` then pairs the two benchmark tables prompt by prompt.

Without `--url` each command starts `eyas up` for its own length (data in WORK/data, the host named
`--host`, WORK the root jobs may use; a second command finds the first's pipelines there).

    python -m bench.journey run WORK OUT [--prompts MTBENCH.jsonl] [--target DIR | --gguf FILE]
        [--real-target smollm2|qwen2.5-coder-1.5b] [--sweep-prompts 8] [--held-out 72]
        [--conversations 16000] [--epochs 10] [--lr 1e-3] [--openers tasks|none]
        [--configs "3,1,4 5,1,6 7,1,8"] [--repeats 3] [--eval] [--no-serve-held-out]
        [--set SECTION.KEY=JSON ...] [--data CONVERSATIONS.jsonl [--held-out-conversations FILE]]
        [--sglang-args="--attention-backend triton ..."] [--host gpu] [--url URL --token-file FILE]
    python -m bench.journey sweep WORK OUT --pipeline ID --draft DIR [--held-out]
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import httpx

from bench import _cli as cli
from bench._journey_api import (
    connected,
    follow_job,
    follow_pipeline,
    job_logs,
    posted,
    step_job,
    write_report,
)
from cli.demo.real import ANSWER_TOKENS, DEMO_TARGET_OPTIONS, demo_prompt_counts, gpu_pipeline_spec
from cli.pipelines import param_changes
from contract.stages import STAGES
from drafting.prompting.named import resolve_source
from drafting.prompting.split import split_prompt_file
from drafting.realmodels import REAL_TARGETS, build_target


def parse_configs(text: str) -> list[dict[str, int]]:
    """'3,1,4 5,1,6' -> sweep configs (steps, topk, draft_tokens)."""
    names = ("steps", "topk", "draft_tokens")
    try:
        return [dict(zip(names, map(int, config.split(",")), strict=True)) for config in text.split()]
    except ValueError:
        raise SystemExit(f"--configs {text!r}: give steps,topk,draft_tokens per config") from None


def split_mtbench(source: Path, work: Path, asked: int, held_out: int) -> tuple[Path, Path]:
    """MT-Bench in two files that share no question: WORK/mtbench_eval.jsonl, the `asked` questions (in
    category rotation) that eval and the sweep ask, and WORK/mtbench_held_out.jsonl, the next `held_out` in
    the same rotation, which train validates on and serve_held_out serves."""
    evaluated, validated = work / "mtbench_eval.jsonl", work / "mtbench_held_out.jsonl"
    try:
        return split_prompt_file(source, asked, held_out, evaluated, validated)
    except ValueError as exc:
        raise SystemExit(f"--held-out {held_out}: {exc}") from None


def pipeline_spec(
    args: argparse.Namespace, target: Path, prompts: Path, held_out: Path | None
) -> dict[str, Any]:
    """The GPU recipe on this host's folders, with the journey's flags: checked before anything is posted."""
    assets = {"target": str(target), "prompts": str(prompts)}
    if held_out is not None:
        assets["held_out_prompts"] = str(held_out)
    sweep = dict(DEMO_TARGET_OPTIONS.get(args.real_target, {}).get("sweep", {}))
    sweep["max_prompts"] = sweep_prompts(args)
    if args.configs:
        sweep["configs"] = parse_configs(args.configs)
    if args.repeats is not None:
        sweep["repeats"] = args.repeats
    spec = gpu_pipeline_spec(
        assets, workdir=str(args.work.resolve() / "runs"), conversations=args.conversations,
        epochs=args.epochs, lr=args.lr, openers=None if args.openers == "none" else args.openers,
        eval_step=args.eval, sglang_args=shlex.split(args.sglang_args), sweep=sweep,
    )  # fmt: skip
    spec["host"] = args.host
    if args.no_serve_held_out and "held_out" in spec:
        spec["held_out"] = spec["held_out"] | {"serve": False}
    if args.data is not None:
        spec = on_conversations(spec, args.data, args.held_out_conversations)
    return with_settings(spec, args.set or [])


def sweep_prompts(args: argparse.Namespace) -> int:
    """The MT-Bench questions the sweep asks: --sweep-prompts, else the real target's demo's count."""
    return args.sweep_prompts or demo_prompt_counts(args.real_target, gpu=True)[0]


def on_conversations(spec: dict[str, Any], training: Path, held_out: Path | None) -> dict[str, Any]:
    """The spec on conversations the target already wrote and answered: `data` instead of generate, and the
    held-out set (when the spec has one) as answered conversations, served with the budget they were
    answered with. When the spec asks for fewer conversations than the file holds, extract takes the first
    that many."""
    if "held_out" in spec and held_out is None:
        raise SystemExit(
            "--data with --held-out needs --held-out-conversations: the held-out questions as the target "
            "answered them (an earlier journey's generate_held_out output)"
        )
    given = {k: v for k, v in spec.items() if k not in ("generate", "held_out")} | {"data": str(training)}
    asked = ((spec.get("generate") or {}).get("self_prompts") or {}).get("count")
    with training.open("rb") as lines:
        records = sum(1 for _ in lines)
    if asked is not None and records > asked:
        given["extract"] = {**spec["extract"], "limit": asked}
    if "held_out" not in spec or held_out is None:
        return given
    answered = {"conversations": str(held_out), "serve": spec["held_out"].get("serve", True)}
    return given | {"held_out": answered | {"max_new_tokens": ANSWER_TOKENS}}


def with_settings(spec: dict[str, Any], changes: list[str]) -> dict[str, Any]:
    """The spec with `--set SECTION.KEY=JSON` changes (e.g. train.norm_output=false, or
    fix_keys.sglang_version="0.5.23"), each into a section of the spec or a step it leaves at its defaults,
    and for a step a field of its params: a misspelt name fails here, before any GPU
    time, not as a 422 after the target is built."""
    changed = dict(spec)
    for section, values in param_changes(changes).items():
        stage = STAGES.get(section)
        if stage is not None and section not in changed:  # a step the spec leaves at its defaults
            changed[section] = {}
        if not isinstance(changed.get(section), dict):
            raise SystemExit(f"--set {section}.*: the pipeline has no {section!r} section to change")
        unknown = sorted(set(values) - set(stage.params.model_fields)) if stage else []
        if unknown:
            raise SystemExit(f"--set {section}.{unknown[0]}: {section} has no such param")
        changed[section] = changed[section] | values
    return changed


def prepare(args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """The target (given, or SmolLM2 built into WORK/target from its GGUF or its package) and the spec on
    WORK's copies of the prompts: every path the pipeline reads lies under a root the worker allows. The
    flags are checked first, so a bad one costs no build."""
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    target = args.target.resolve() if args.target is not None else work / "target"
    source = resolve_source(args.prompts)  # a named set's installed file, or the path given
    held_out = None
    if args.held_out:
        prompts, held_out = split_mtbench(source, work, sweep_prompts(args), args.held_out)
    else:
        prompts = work / "mtbench.jsonl"
        shutil.copyfile(source, prompts)
    spec = pipeline_spec(args, target, prompts, held_out)
    if args.target is None:
        build_target(args.real_target, target, gguf=args.gguf)
    return target, spec


def run(args: argparse.Namespace) -> int:
    target, spec = prepare(args)
    roots = tuple(
        p.resolve().parent for p in (target / "config.json", args.data, args.held_out_conversations) if p
    )
    with connected(args.work.resolve(), args.out, host=args.host, url=args.url, token_file=args.token_file,
                   roots=roots) as http:  # fmt: skip
        pipeline = posted(http, "/v1/pipelines", spec)
        print(f"pipeline {pipeline['id']}", flush=True)
        ended = follow_pipeline(http, pipeline["id"])
        write_report(http, ended, args.out)
    return 0 if ended["state"] == "succeeded" else 1


def draft_sweep(pipeline: dict[str, Any], draft: Path, *, held_out: bool) -> dict[str, Any]:
    """A benchmark job that serves `draft` as the pipeline's sweep (or serve_held_out) step served its own
    drafter: the step's params with the draft replaced, on the same host."""
    step = "serve_held_out" if held_out else "benchmark"
    job = step_job(pipeline, step)
    if job is None:
        raise SystemExit(f"pipeline {pipeline['id']} has no {step} step to serve the draft as")
    params = json.loads(json.dumps(job["params"]))  # a copy: the pipeline's own params stay as they were
    params["launch"]["draft"] = str(draft)
    return {"kind": "benchmark", "host": job["host"], "params": params}


def sweep(args: argparse.Namespace) -> int:
    draft = args.draft.resolve()
    with connected(args.work.resolve(), args.out, host=args.host, url=args.url, token_file=args.token_file,
                   roots=(draft.parent,)) as http:  # fmt: skip
        pipeline = _pipeline(http, args.pipeline)
        job = posted(http, "/v1/jobs", draft_sweep(pipeline, draft, held_out=args.held_out))
        print(f"benchmark job {job['id']} serves {draft}", flush=True)
        ended = follow_job(http, job["id"])
        args.out.mkdir(parents=True, exist_ok=True)
        name = f"sweep{'_held_out' if args.held_out else ''}"
        (args.out / f"{name}.json").write_text(json.dumps(ended, indent=2))
        (args.out / f"{name}_log.txt").write_text(job_logs(http, [ended]))
        print(f"{ended['state']}: {json.dumps(ended['result'])[:1500]}", flush=True)
    return 0 if ended["state"] == "succeeded" else 1


def _pipeline(http: httpx.Client, pipeline_id: str) -> dict[str, Any]:
    found = http.get(f"/v1/pipelines/{pipeline_id}")
    if found.status_code != 200:
        raise SystemExit(f"--pipeline {pipeline_id}: {found.status_code} {found.text}")
    pipeline: dict[str, Any] = found.json()
    return pipeline


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = cli.parser(__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    started = commands.add_parser("run", help="post the journey's pipeline and follow it to its end")
    served = commands.add_parser("sweep", help="serve a draft through a pipeline's own sweep")
    for command in (started, served):
        command.add_argument("work", type=Path, help="the journey's folder (eyas's data, prompts, runs)")
        command.add_argument("out", type=Path, help="where the report goes")
        command.add_argument("--host", default="gpu", help="the GPU host's name in eyas")
        command.add_argument("--url", help="an eyas already running (default: `eyas up` for this command)")
        command.add_argument("--token-file", type=Path, help="with --url: a file holding its token")
    target = started.add_mutually_exclusive_group()
    target.add_argument("--target", type=Path, help="the target's HF folder (default: --real-target, built)")
    target.add_argument("--gguf", type=Path, help="build --real-target into WORK/target from this GGUF file")
    started.add_argument(
        "--real-target", choices=sorted(REAL_TARGETS), default="smollm2",
        help="the real target built into WORK/target, whose demo's sweep the journey runs (with --target: "
        "the one that folder holds)",
    )  # fmt: skip
    started.add_argument(
        "--sweep-prompts", type=int, help="MT-Bench questions the sweep asks (default: the target's demo's)"
    )
    started.add_argument(
        "--prompts", default="mtbench", help="MT-Bench's question file, or a named set (default: mtbench)"
    )
    started.add_argument("--held-out", type=int, default=72, help="MT-Bench questions held out (0: none)")
    started.add_argument("--conversations", type=int, default=16000, help="self-prompted conversations")
    started.add_argument("--epochs", type=int, default=10)
    started.add_argument("--lr", type=float, default=1e-3)
    started.add_argument("--openers", default="tasks", help="self-prompt openers: 'tasks' or 'none'")
    started.add_argument(
        "--configs", help='sweep configs "steps,topk,draft_tokens ..." (default: the recipe\'s)'
    )
    started.add_argument("--repeats", type=int, help="the sweep's interleaved rounds (default: the recipe's)")
    started.add_argument("--eval", action="store_true", help="an eval step too (the sweep measures the same)")
    started.add_argument("--no-serve-held-out", action="store_true", help="validate on held-out, serve none")
    started.add_argument("--set", action="append", help="SECTION.KEY=JSON into the spec (repeatable)")
    started.add_argument("--data", type=Path, help="training conversations the target wrote: no generate")
    started.add_argument("--held-out-conversations", type=Path, help="with --data: the held-out answers")
    started.add_argument(
        "--sglang-args", default="", help='extra arguments of every SGLang launch (--sglang-args="--x y")'
    )
    served.add_argument("--pipeline", required=True, help="the pipeline whose sweep serves the draft")
    served.add_argument("--draft", type=Path, required=True, help="an SGLang-ready draft folder")
    served.add_argument("--held-out", action="store_true", help="as serve_held_out serves, not the sweep")
    return parser.parse_args(argv)


def main() -> None:
    args = parse()
    sys.exit(run(args) if args.command == "run" else sweep(args))


if __name__ == "__main__":
    main()
