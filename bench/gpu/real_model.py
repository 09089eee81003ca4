"""The real-model journey on a GPU host, driven through eyas's own API: SmolLM2-135M-Instruct built from its
GGUF, then one `POST /v1/pipelines` that starts from prompts the target writes itself (generate → extract →
train → fix_keys → gpu_check → [eval on MT-Bench →] serve_held_out, SGLang on the held-out questions → a
sweep of chain and tree configurations with real SGLang, CUDA graphs on, baseline and speculative rounds
interleaved).

The device allows 10 minutes a command: `start` builds the target, starts `eyas up` detached and posts the
pipeline; `wait` (a later command on the same machine) follows it, and when `eyas up` did not survive,
starts it again and retries the pipeline from its failed step (the product's own retry). Both report.

    python3 bench/gpu/real_model.py start WORK OUT --gguf FILE --mtbench FILE [--conversations N]
        [--epochs N] [--lr LR] [--truncated-answers keep|drop] [--held-out N] [--no-eval] [--openers tasks]
        [--train-compile auto|on|off]
        [--configs "3,1,4 5,1,6"] [--repeats N] [--carried DIR]
        # every call saves the generated conversations to OUT (carried.py): whole once generate is done,
        # as they stand (NAME.partial.gz.partN) when the call ends first, and the draft when it ends
        # between fix_keys and the pipeline's end; --carried DIR starts from such a copy instead of
        # generating (a partial one completed first, generate resumed into it), or with a draft there
        # (or in --carried-draft DIR), serves it alone (serve_held_out and the sweep as the pipeline
        # plans them; OUT/served.json)
        # --held-out N: MT-Bench is split in WORK: mtbench_eval.jsonl (the 8 questions eval and the sweep
        # ask, one per category) and mtbench_held_out.jsonl (the next N in the same category rotation), the
        # pipeline's `held_out` set (train validates on it, and takes its estimate and best epoch from it)
    python3 bench/gpu/real_model.py wait WORK OUT [--deadline-s 540] [--retry-with train.compile=false]
    python3 bench/gpu/real_model.py direct WORK OUT     # after generate: generate_direct.py on its output
    python3 bench/gpu/real_model.py speculators WORK OUT [--deadline-s S] [--spec-compile]   # issue 15: once
        # the pipeline ended, speculators' trainer on its extraction with its train settings, detached
        # (WORK/spec); eager unless --spec-compile
    python3 bench/gpu/real_model.py spec-sweep WORK OUT [--deadline-s S]    # its draft through a chain sweep
    python3 bench/gpu/real_model.py recipes WORK OUT [--recipe-set data-size|speculators]   # after the
        # pipeline: bench/gpu/recipes.py on its extraction and held-out one, a RECIPE_SETS entry at once
    python3 bench/gpu/real_model.py recipe-sweep WORK OUT   # the recipe best on held-out, through a sweep
    python3 bench/gpu/real_model.py draft-parts WORK OUT    # the pipeline's draft, as keep_draft saves it
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import carried
from e2e_pipeline import SGLANG_ARGS
from host_probe import probe
from journey_api import (
    ROOT,
    answers,
    client,
    eyas_up,
    posted_pipeline,
)
from recipe_phases import RECIPE_SETS, recipes
from recipe_sweep import recipe_sweep
from side_by_side_phases import TRAINERS, pair, side_sweep, start_trainer
from speculators_side_by_side import SGLANG_DRAFT

from cli.pipelines import param_changes
from drafting.realmodels.demo import ANSWER_TOKENS, EVAL_PROMPTS, gpu_pipeline_spec

CONFIGS = [
    {"steps": 3, "topk": 1, "draft_tokens": 4},
    {"steps": 5, "topk": 1, "draft_tokens": 6},
    {"steps": 7, "topk": 1, "draft_tokens": 8},
    {"steps": 5, "topk": 4, "draft_tokens": 8},
]


def pipeline_spec(
    work: Path,
    mtbench: Path,
    conversations: int,
    epochs: int,
    truncated: str = "keep",
    held_out: Path | None = None,
    *,
    lr: float = 1e-3,
    openers: str | None = None,
    eval_step: bool = True,
    configs: list[dict[str, int]] | None = None,
    repeats: int = 3,
) -> dict[str, Any]:
    """The product's GPU recipe (`eyas demo --target smollm2 --gpu`) on this host's folders and wheel set,
    with the journey's settings."""
    assets = {"target": str(work / "smollm2"), "prompts": str(mtbench)}
    if held_out is not None:
        assets["held_out_prompts"] = str(held_out)
    spec = gpu_pipeline_spec(
        assets, workdir=str(work / "runs"), conversations=conversations, epochs=epochs, lr=lr,
        openers=openers, truncated_answers=truncated, eval_step=eval_step, configs=configs or CONFIGS,
        repeats=repeats, sglang_args=SGLANG_ARGS,
    )  # fmt: skip
    return spec | {"host": "h200", "fix_keys": {"sglang_version": "0.5.14"}}


def parse_configs(text: str) -> list[dict[str, int]]:
    """'3,1,4 5,1,6' -> sweep configs (steps, topk, draft_tokens)."""
    names = ("steps", "topk", "draft_tokens")
    return [dict(zip(names, map(int, config.split(",")), strict=True)) for config in text.split()]


def split_mtbench(source: Path, work: Path, held_out: int) -> tuple[Path, Path]:
    """MT-Bench in two files that share no question (drafting.prompting.split): WORK/mtbench_eval.jsonl, the
    EVAL_PROMPTS questions eval and the sweep have asked in every run so far, and
    WORK/mtbench_held_out.jsonl, the next `held_out` in the same category rotation."""
    from drafting.prompting.split import split_prompt_file

    evaluated, validated = work / "mtbench_eval.jsonl", work / "mtbench_held_out.jsonl"
    try:
        return split_prompt_file(source, EVAL_PROMPTS, held_out, evaluated, validated)
    except ValueError as exc:
        raise SystemExit(f"--held-out {held_out}: {exc}") from None


def eval_prompts(work: Path) -> Path:
    """The MT-Bench file eval and the sweep ask in WORK: the eval part of the split (`start --held-out`), or
    the whole set copied."""
    evaluated = work / "mtbench_eval.jsonl"
    return evaluated if evaluated.exists() else work / "mtbench.jsonl"


def start(args: argparse.Namespace) -> None:
    from drafting.realmodels import build_target

    work, out = args.work.resolve(), args.out
    work.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    build_target("smollm2", work / "smollm2", gguf=args.gguf)
    print(f"target built in {time.monotonic() - began:.0f}s", flush=True)
    if not answers():
        eyas_up(work, out)
    http = client(work)
    held_out = None
    if args.held_out:  # eval and the sweep ask the same 8 questions as before, from a file of their own
        mtbench, held_out = split_mtbench(args.mtbench, work, args.held_out)
    else:
        mtbench = work / "mtbench.jsonl"  # inside the host's allowed root
        mtbench.write_bytes(args.mtbench.read_bytes())
    spec = pipeline_spec(
        work,
        mtbench,
        args.conversations,
        args.epochs,
        args.truncated_answers,
        held_out,
        lr=args.lr,
        openers=None if args.openers == "none" else args.openers,
        eval_step=not args.no_eval,
        configs=parse_configs(args.configs) if args.configs else None,
        repeats=args.repeats,
    )
    spec = with_flags(spec, args.train_compile, args.no_serve_held_out, args.set or [])
    if args.carried is not None:  # an earlier call's generate output (carried.py): no generate step
        from_carried = carried.spec_from_carried(
            http, spec, args.carried, work, out, began, args.deadline_s, answer_tokens=ANSWER_TOKENS
        )
        if from_carried is None:
            return
        spec = from_carried
        draft = carried.unpack_draft(args.carried_draft or args.carried, work / "carried_draft")
        if draft is None and args.carried_draft is not None:
            raise SystemExit(f"--carried-draft {args.carried_draft}: no {carried.DRAFT_MANIFEST} there")
        if draft is not None:  # train ended on a machine since lost (carried.keep_draft): serve its draft
            carried.serve_carried(http, carried.serve_jobs(spec, draft, work), out, began, args.deadline_s)
            return
    created = http.post("/v1/pipelines", json=spec)
    if created.status_code != 201:
        raise SystemExit(created.text)
    (work / "pipeline_id").write_text(created.json()["id"])
    carried.follow_saving(http, created.json()["id"], out, began, args.deadline_s)


def with_flags(
    spec: dict[str, Any], train_compile: str, no_serve_held_out: bool, changes: list[str]
) -> dict[str, Any]:
    """The spec as `start`'s flags change it, before any GPU time (carried_spec keeps these sections):
    `--train-compile`, `--no-serve-held-out`, and the `--set` changes."""
    spec = with_settings(spec, changes)
    if train_compile != "auto":
        spec["train"] = spec["train"] | {"compile": train_compile == "on"}
    if no_serve_held_out and "held_out" in spec:
        spec["held_out"] = spec["held_out"] | {"serve": False}
    return spec


def with_settings(spec: dict[str, Any], changes: list[str]) -> dict[str, Any]:
    """The spec with `--set SECTION.KEY=JSON` changes (a train recipe, e.g. train.norm_output=true), each
    into an existing section and, for a stage's section, a field of its params: a misspelt name fails
    here, not as a 422 after the held-out answers (run 13 lost 154 s to one)."""
    from contract.stages import STAGES

    changed = dict(spec)
    for section, values in param_changes(changes).items():
        if not isinstance(changed.get(section), dict):
            raise SystemExit(f"--set {section}.*: the pipeline has no {section!r} section to change")
        stage = STAGES.get(section)
        unknown = sorted(set(values) - set(stage.params.model_fields)) if stage else []
        if unknown:
            raise SystemExit(f"--set {section}.{unknown[0]}: {section} has no such param")
        changed[section] = changed[section] | values
    return changed


def wait(args: argparse.Namespace) -> None:
    """Follow the pipeline to its end (or the deadline). A failed pipeline is retried only where a retry can
    help: when `eyas up` died with the last command (its steps were lost), or with `--retry-with` changes.
    Run 7's `wait` retried a train that failed in the compiler, and it failed again the same way; a sweep the
    release gate refused would have run again for four minutes."""
    work, out = args.work.resolve(), args.out
    began = time.monotonic()
    restarted = not answers()
    if restarted:
        print("eyas up did not survive the last command: starting it again", flush=True)
        eyas_up(work, out)
    http = client(work)
    pipeline = posted_pipeline(http, work)
    pipeline_id = pipeline["id"]
    if pipeline["state"] in ("failed", "cancelled"):
        failed = next(j for j in pipeline["jobs"] if j["pipeline_step"] == pipeline["failed_step"])
        print(f"{pipeline['failed_step']} {failed['state']}: {failed.get('message')}", flush=True)
        if restarted or args.retry_with:
            body = {"params": param_changes(args.retry_with or [])}
            print(f"retrying from {pipeline['failed_step']} with {body['params']}", flush=True)
            http.post(f"/v1/pipelines/{pipeline_id}/retry", json=body).raise_for_status()
    carried.follow_saving(http, pipeline_id, out, began, args.deadline_s)


def direct(args: argparse.Namespace) -> None:
    """eyas's generate client against SGLang driven directly, on the prompts the pipeline generated from
    (its output's user turns), with its answer budget and concurrency (the server must be free: run it
    after the pipeline, or before it starts its next GPU step)."""
    work = args.work.resolve()
    conversations = next((work / "runs").glob("*/conversations.jsonl"))
    command = [sys.executable, str(ROOT / "bench" / "gpu" / "generate_direct.py"), str(work / "smollm2")]
    command += [str(conversations), str(args.out), "--records", "1024", "--concurrency", "256"]
    command += ["--max-new-tokens", str(ANSWER_TOKENS)]
    subprocess.run(command, check=True, cwd=ROOT)


def speculators(args: argparse.Namespace) -> None:
    start_trainer(args, "speculators")


def specforge(args: argparse.Namespace) -> None:
    start_trainer(args, "specforge")


def draft_parts(args: argparse.Namespace) -> None:
    """An SGLang draft (~47 MB for SmolLM2) to OUT for a CPU's analysis, in parts (carried.save_draft;
    `carried.unpack_draft` makes it whole): the pipeline's fix_keys output, or with `--draft-of TRAINER` the
    reference trainer's fix-keyed draft (run 15 served speculators' and kept none of it to compare)."""
    work = args.work.resolve()
    if args.draft_of != "pipeline":
        carried.save_draft(work / TRAINERS[args.draft_of][0] / SGLANG_DRAFT, args.out)
        return
    fix_keys = next(
        j for j in posted_pipeline(client(work), work)["jobs"] if j["pipeline_step"] == "fix_keys"
    )
    carried.save_draft(Path(fix_keys["params"]["dest"]), args.out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=PHASES)
    parser.add_argument("work", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--gguf", type=Path)
    parser.add_argument("--mtbench", type=Path)
    parser.add_argument("--conversations", type=int, default=6000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--no-eval", action="store_true", help="a pipeline without the eval step")
    parser.add_argument(
        "--openers",
        default="tasks",
        help="self-prompt openers (docs/generate.md, Openers): 'tasks' (default; run 6 against run 5: "
        "held-out first-token accuracy 0.509 -> 0.594) or 'none' for the target's prefix alone",
    )
    parser.add_argument("--configs", help='sweep configs "steps,topk,draft_tokens ..." (default: CONFIGS)')
    parser.add_argument("--repeats", type=int, default=3, help="the sweep's interleaved rounds")
    parser.add_argument(
        "--spec-compile", action="store_true", help="speculators: its own torch.compile (default: --eager)"
    )
    parser.add_argument("--trainer", choices=["speculators", "specforge"], default="speculators")
    parser.add_argument(
        "--sweep-prompts",
        choices=["eval", "held-out"],
        default="eval",
        help="spec-sweep: the 8 eval questions (192 tokens, ignore_eos), or the 72 held-out ones as the "
        "pipeline's serve_held_out asks them (the draft's held-out figure beside the pipeline drafter's)",
    )
    parser.add_argument(
        "--draft-of",
        choices=["pipeline", *TRAINERS],
        default="pipeline",
        help="draft-parts: whose SGLang draft (the pipeline's, or a reference trainer's)",
    )
    parser.add_argument("--recipe-set", choices=sorted(RECIPE_SETS), default="data-size")
    parser.add_argument("--only", action="append", help="recipes: only this variant of the set (repeatable)")
    parser.add_argument(
        "--set",
        action="append",
        help="start: change the pipeline's spec, SECTION.KEY=JSON (e.g. train.norm_output=true), repeatable",
    )
    parser.add_argument(
        "--no-serve-held-out",
        action="store_true",
        help="start --held-out: train validates on the held-out set, but no serve_held_out step (~170 s)",
    )
    parser.add_argument(
        "--train-compile",
        choices=["auto", "on", "off"],
        default="auto",
        help="the train step's torch.compile (auto: the stage's rule, 1,200 steps per compiled length; run "
        "7's compiled train failed at a recompile, fixed since and proven by compile_check.py in run 8)",
    )
    parser.add_argument(
        "--retry-with",
        action="append",
        help="wait: retry a failed pipeline with this change, SECTION.KEY=JSON (e.g. train.compile=false)",
    )
    parser.add_argument("--deadline-s", type=float, default=540)
    parser.add_argument("--truncated-answers", choices=["keep", "drop"], default="keep")
    parser.add_argument(
        "--carried",
        type=Path,
        help="start: conversations an earlier call saved to OUT (carried.py), not generate",
    )
    parser.add_argument(
        "--carried-draft",
        type=Path,
        help="start --carried: the folder of a kept draft's parts, when not in --carried (its own call)",
    )
    parser.add_argument(
        "--held-out", type=int, default=0, help="MT-Bench questions for the held-out validation set (0: none)"
    )
    args = parser.parse_args()
    if args.phase not in ("start", "wait"):
        PHASES[args.phase](args)
        return
    host = f"[host] {json.dumps(probe())}"  # runs 8-11 generated 2.6x apart on the same settings
    print(host, flush=True)
    try:
        PHASES[args.phase](args)
    finally:
        print(host, flush=True)  # again at the end: a call returns its output's tail (run 11 lost the first)


PHASES = {
    "start": start,
    "wait": wait,
    "direct": direct,
    "speculators": speculators,
    "specforge": specforge,
    "spec-sweep": side_sweep,
    "recipes": recipes,
    "recipe-sweep": recipe_sweep,
    "draft-parts": draft_parts,
    "pair": pair,
}


if __name__ == "__main__":
    main()
