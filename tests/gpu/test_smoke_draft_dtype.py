"""Issue 12, fault 1 on real SGLang: does the load smoke test catch a converted draft that SGLang kills?

    export PYTHONPATH=/tmp/site            # the SGLang 0.5.14 wheel set (shared/gpu/README.md)
    python3 bench/gpu/smoke_fault1.py INPUTS WORK [--timeout-s 240]

INPUTS is what bench/gpu/make_fault1_inputs.py wrote (target/, draft_speculators/, draft_native/). Steps:
1. `eyas fix-keys INPUTS/draft_speculators WORK/fixed --target INPUTS/target` (the current converter);
2. WORK/unfixed: the same folder with torch_dtype (and dtype) removed from config.json, as the converter
   wrote it before the fix: SGLang 0.5.14 builds that draft in float16 against a bf16 target;
3. the smoke test (drafting.serving.smoke, real SGLang, CUDA graphs ON, triton attention, pytorch sampling, no
   grammar backend) on unfixed (launch checks not enforced, so the server really starts), on fixed (against
   a no-speculation baseline), and on draft_native (the same tensors in SGLang's native layout).
Prints one JSON: unfixed caught (server died), fixed passed with its acceptance, native's acceptance.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from drafting.serving.smoke import SmokeReport  # noqa: E402
from drafting.serving.smoke_local import SmokeRequest, run_local_smoke  # noqa: E402

SGLANG_ARGS = ["--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none"]
EXPLAINING = ("mat1 and mat2", "Scheduler hit an exception", "Capture cuda graph failed", "Error", "error")


def fix_keys(source: Path, dest: Path, target: Path) -> dict[str, Any]:
    """The CLI first (what a user runs); the library call if the CLI cannot import here."""
    argv = [sys.executable, "-m", "cli.main", "fix-keys", str(source), str(dest), "--target", str(target)]
    done = subprocess.run([*argv, "--json"], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return {"via": "eyas fix-keys", "exit_code": 0}
    if "ModuleNotFoundError" not in done.stderr:
        raise SystemExit(
            f"fix-keys failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    from drafting.checkpoint import fix_checkpoint

    report = fix_checkpoint(source, dest, target=target, sglang_version="0.5.14", force=True)
    missing = done.stderr.strip().splitlines()[-1]
    return {"via": f"drafting.checkpoint.fix_checkpoint (the CLI: {missing})", "ok": report.ok}


def unfixed_copy(fixed: Path, dest: Path) -> list[str]:
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(fixed, dest)
    config = json.loads((dest / "config.json").read_text())
    removed = [key for key in ("torch_dtype", "dtype") if config.pop(key, None) is not None]
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    return removed


def summary(report: SmokeReport, started: float) -> dict[str, Any]:
    out = report.as_dict()
    lines = out.pop("log_lines")
    out["explaining_lines"] = [line for line in lines if any(mark in line for mark in EXPLAINING)][-12:]
    out["log_tail"] = lines[-8:]
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("inputs", type=Path)
    parser.add_argument("work", type=Path)
    parser.add_argument("--timeout-s", type=float, default=240)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    inputs, work = args.inputs.resolve(), args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    target = inputs / "target"
    result: dict[str, Any] = {"sglang_args": SGLANG_ARGS, "cuda_graphs": True}
    shutil.rmtree(work / "fixed", ignore_errors=True)
    result["fix_keys"] = fix_keys(inputs / "draft_speculators", work / "fixed", target)
    fixed_config = json.loads((work / "fixed" / "config.json").read_text())
    result["fixed_config_dtype"] = {k: fixed_config.get(k) for k in ("torch_dtype", "dtype")}
    result["unfixed_removed"] = unfixed_copy(work / "fixed", work / "unfixed")

    def smoke(draft: Path, **kwargs: Any) -> tuple[SmokeReport, dict[str, Any]]:
        started = time.monotonic()
        request = SmokeRequest(
            draft=draft,
            target=target,
            engine="sglang",
            depth=3,
            requests=args.requests,
            max_new_tokens=args.max_new_tokens,
            extra_args=SGLANG_ARGS,
            mem_fraction_static=0.5,
            ready_timeout_s=args.timeout_s,
            enforce_checks=False,  # start even what the doctor refuses: this measures serving
        )
        report = run_local_smoke(request, **kwargs)
        return report, summary(report, started)

    unfixed, result["unfixed"] = smoke(work / "unfixed", compare=False)
    result["unfixed"]["caught"] = unfixed.verdict in ("server_died", "not_ready")
    fixed, result["fixed"] = smoke(work / "fixed")
    native, result["native"] = smoke(inputs / "draft_native", baseline=fixed.baseline)
    result["ok"] = bool(result["unfixed"]["caught"] and fixed.ok and native.ok)
    result["accept_length"] = {"fixed": fixed.accept_length, "native": native.accept_length}
    print(json.dumps(result, indent=2), flush=True)


if __name__ == "__main__":
    main()
