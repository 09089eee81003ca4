"""eyas `eval` on the CPU of an SGLang draft for SmolLM2-135M-Instruct, on the prompt sets the GPU journey
serves it on, to set eyas's own prediction beside what SGLang served (prints each set's depths, writes
OUT.json).

The sets: `eval-eos`, the 8 MT-Bench questions of the journey's sweep (192 tokens, `ignore_eos`: decoding
runs past the end of turn); `eval`, the same questions with answers ending at their end of turn; and
`held-out`, the journey's held-out MT-Bench questions (answers end at their end of turn, 384 tokens at most).
The difference between the sets splits into the questions and the decoding past the end of turn.

    python -m bench.draft_eval DRAFT_DIR OUT.json [--work DIR] [--held-out 72]
        [--sets eval-eos,eval,held-out] [--depths 3,5,7] [--dtype float32|bfloat16]

DRAFT_DIR is an SGLang draft folder (config.json + model.safetensors): the journey's fix_keys output, or a
reference trainer's `sglang_draft`. float32 by default: where the decode meets a near-tie, its text can part
from SGLang's bf16 text (docs/design/near-tie-judging.md); --dtype bfloat16 computes as SGLang does.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench import _cli as cli
from cli.demo.real import ANSWER_TOKENS, SWEEP_TOKENS, write_real_demo
from contract.params.evaluate import EvalParams
from drafting.context import StageContext
from drafting.stages import evaluate as evaluate_stage

# name -> (which MT-Bench file, max_new_tokens, ignore_eos): the sweep's and the held-out sweep's settings
SETS: dict[str, tuple[str, int, bool]] = {
    "eval-eos": ("prompts", SWEEP_TOKENS, True),  # what the pipeline's sweep asks
    "eval": ("prompts", SWEEP_TOKENS, False),  # the same questions, answers ending at their end of turn
    "held-out": ("held_out_prompts", ANSWER_TOKENS, False),  # what the pipeline's serve_held_out asks
}


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("draft", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/eyas-real-eval"))
    parser.add_argument("--held-out", type=int, default=72)
    parser.add_argument("--depths", default="3,5,7")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parser.parse_args()
    assets = write_real_demo(args.work / "assets", held_out=args.held_out)
    depths = [int(d) for d in args.depths.split(",")]
    report: dict[str, Any] = {
        "draft": str(args.draft.resolve()), "target": assets["target"], "dtype": args.dtype, "sets": {},
    }  # fmt: skip
    for name in args.sets.split(","):
        which, tokens, ignore_eos = SETS[name]
        prompts = Path(assets[which])
        questions = sum(1 for line in prompts.read_text().splitlines() if line.strip())
        params = EvalParams(
            model=assets["target"], draft=str(args.draft.resolve()), depths=depths, prompts=str(prompts),
            max_prompts=questions, max_new_tokens=tokens, ignore_eos=ignore_eos, check_outputs=False,
            device="cpu", dtype=args.dtype,
        )  # fmt: skip
        began = time.monotonic()
        result = evaluate_stage.run(StageContext(work_dir=args.work / name), params)
        keep = ("depth", "accept_length", "accept_length_meta", "position_accept_rate")
        report["sets"][name] = {
            "prompts": str(prompts), "questions": questions, "max_new_tokens": tokens,
            "ignore_eos": ignore_eos, "wall_s": round(time.monotonic() - began, 1),
            "depths": [{k: row.get(k) for k in keep} for row in result["depths"]],
        }  # fmt: skip
        print(name, json.dumps(report["sets"][name]["depths"]), flush=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
