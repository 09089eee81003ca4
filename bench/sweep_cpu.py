"""The depth sweep as a user sees it, on the CPU, with eyas's reference engine and a tiny model.

Builds a random 8-layer Llama target (hidden 64, vocab 256) and an EAGLE-3 drafter fitted briefly to the
target's greedy continuations of the built-in prompt set (sent as UTF-8 byte ids: the tiny target has no
tokenizer), then runs the benchmark stage in sweep mode: a no-speculation baseline and each depth, each
launched, benchmarked and stopped, then the comparison table and the release gate. The drafter has seen these
very continuations, so acceptance is a plumbing figure, not a quality one. Also runs the offline eval on
the same prompts so its prediction can be read beside what the server measured.

    python -m bench.sweep_cpu [--small]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench import _cli as cli
from contract.params.benchmark import BenchmarkParams
from contract.params.evaluate import EvalParams
from drafting.context import StageContext, StageError
from drafting.serving.launch.host_checks import free_port
from drafting.serving.prompts import load_prompts
from drafting.stages import benchmark as benchmark_stage
from drafting.stages import evaluate as evaluate_stage
from testsupport.tiny_pair import make_pair


@dataclass
class QuietContext(StageContext):
    """Stage log to stderr, so stdout carries only the JSON result."""

    def log(self, text: str, *, stream: str = "stdout") -> None:
        print(text, file=sys.stderr, flush=True)


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--small", action="store_true", help="6 prompts, 32 tokens, depths 5 and 2")
    args = parser.parse_args()
    prompts_count, new_tokens, depths, fit_steps = (
        (6, 32, [5, 2], 80) if args.small else (16, 128, [16, 10, 5], 300)
    )
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        prompt_ids = [p.ids_or_bytes(256) for p in load_prompts(limit=prompts_count)]
        started = time.monotonic()
        pair = make_pair(work / "pair", fit_steps=fit_steps, new_tokens=new_tokens, prompt_ids=prompt_ids)
        fit_s = time.monotonic() - started
        prompt_file = work / "prompts.jsonl"
        prompt_file.write_text("\n".join(json.dumps({"input_ids": ids}) for ids in prompt_ids))
        ctx = QuietContext(work_dir=work)
        sweep = _sweep(ctx, pair.target, pair.draft, prompt_file, depths, new_tokens)
        offline = _eval(ctx, pair.target, pair.draft, prompt_file, depths, new_tokens)
    result = {
        "bench": "sweep_cpu",
        "label": "tiny random target, drafter fitted on these prompts' continuations: plumbing, not quality",
        "engine": "eyas reference engine (CPU, one request at a time, 1 torch thread)",
        "prompts": prompts_count,
        "max_new_tokens": new_tokens,
        "drafter_fit_s": round(fit_s, 1),
        **sweep,
        "offline_eval": offline,
    }
    print(json.dumps(result, indent=2))


def _sweep(
    ctx: StageContext, target: Path, draft: Path, prompts: Path, depths: list[int], new_tokens: int
) -> dict[str, Any]:
    params = BenchmarkParams(
        mode="sweep",
        launch={
            "engine": "reference",
            "model": str(target),
            "draft": str(draft),
            "port": free_port(),
            "max_running_requests": 1,
            "env": {"OMP_NUM_THREADS": "1"},
        },
        depths=depths,
        prompts=str(prompts),
        max_new_tokens=new_tokens,
        warmup_requests=2,
    )
    started = time.monotonic()
    try:
        outcome = benchmark_stage.run(ctx, params)
    except StageError as failure:  # the release gate failing is a result here, not a crash
        outcome = failure.details
    rows = [{k: v for k, v in row.items() if k != "label"} | {"run": row["label"]} for row in outcome["rows"]]
    return {"sweep_s": round(time.monotonic() - started, 1), "rows": rows, "gate": outcome["gate"]}


def _eval(
    ctx: StageContext, target: Path, draft: Path, prompts: Path, depths: list[int], new_tokens: int
) -> list[dict[str, Any]]:
    params = EvalParams(
        model=str(target),
        draft=str(draft),
        depths=depths,
        prompts=str(prompts),
        max_new_tokens=new_tokens,
        device="cpu",
        dtype="float32",
    )
    rows = evaluate_stage.run(ctx, params)["depths"]
    keep = ("depth", "accept_length", "accept_length_meta", "outputs_match", "position_accept_rate")
    return [{k: row[k] for k in keep} for row in rows]


if __name__ == "__main__":
    main()
