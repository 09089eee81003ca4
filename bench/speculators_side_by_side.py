"""speculators 0.9.0's own EAGLE-3 trainer on an eyas extraction, beside eyas's trainer.

Checks that speculators' trainer can read the extraction (each problem names the file or field and the
speculators code reading it), gives speculators a view of it that holds out eyas's validation rows, runs
speculators' own `main(TrainConfig)` (what `speculators train` runs) on eyas's schedule, converts its
checkpoint with `eyas fix-keys` into OUT/sglang_draft and writes OUT/speculators_run.json (times, tokens/s,
peak GPU memory, per-position validation accuracy). `--eyas` first trains eyas's train stage on the same
extraction, settings and rows in this process. Around speculators' trainer there is only a `Trainer`
subclass that times epochs, counts training tokens and keeps validation metrics; `--device cpu` also swaps
what speculators hard-wires to an accelerator. `python -m bench.journey sweep --draft OUT/sglang_draft`
serves the draft through a pipeline's own sweep.

Needs speculators 0.9.0 and hs-connectors 0.9.0 (`scripts/wheelhouse.sh --with speculators` for a host
without network).

    python -m bench.speculators_side_by_side EXTRACTION TARGET OUT --epochs 10 --ttt-steps 7 --lr 1e-3 \
        --batch-size 32 --max-len 1024 [--eyas] [--eager] [--device cpu] [-- more speculators flags]
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import re
import sys
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any, cast
from unittest import mock

import torch

from bench import _cli as cli
from bench._run import python_module
from bench._run import run as run_child
from bench._speculators_layout import make_view, reading_problems, total_seq_len
from drafting.ml.hidden_store import read_manifest

DEPTHS = (3, 5, 7)
PROGRESS_EVERY = 20  # batches between the driver's progress lines, after the first FIRST_BATCHES
# Each of the first batches gets a line: batch k is fetched once step k-1 has run, so the gap from batch 1 to
# 2 is the first step, which torch.compile dominates on a GPU (models/eagle3/core.py:192: the TTT loop's
# graph break makes Dynamo compile frame by frame, some fifteen forward graphs and their backwards).
FIRST_BATCHES = 5
# The folder in a reference trainer's OUT that holds its draft once `eyas fix-keys` made it SGLang's (both
# side-by-side modules write it).
SGLANG_DRAFT = "sglang_draft"


def speculators_argv(
    args: argparse.Namespace, view: Path, aux: list[int], seq_len: int, ratio: float
) -> list[str]:
    """speculators' flags: eyas's schedule where a flag exists, and what SGLang 0.5.14 can serve."""
    out = args.out.resolve()
    argv = [
        "--verifier-name-or-path", str(args.target), "--data-path", str(view),
        "--save-path", str(out / "checkpoints"), "--log-dir", str(out / "logs"),
        "--on-missing", "raise",  # the default `generate` asks vLLM for a missing file (schema.py:264)
        "--target-layer-ids", *map(str, aux),  # the extraction's own aux layers
        "--mask-token-id", "0",  # unused by eagle3; given, so that the target's processor is not loaded
        "--draft-vocab-size", str(args.draft_vocab_size), "--epochs", str(args.epochs),
        "--ttt-steps", str(args.ttt_steps), "--ttt-step-loss-decay", str(args.step_decay),
        "--optimizer", "adamw", "--lr", str(args.lr), "--weight-decay", "0",
        "--scheduler-type", "cosine", "--scheduler-warmup-ratio", str(args.warmup_ratio),
        "--total-seq-len", str(seq_len), "--train-data-ratio", repr(ratio), "--seed", str(args.seed),
        "--num-workers", str(args.num_workers), "--log-freq", str(args.log_freq),
        # SGLang's EAGLE-3 layer keeps the un-normed residual and (0.5.14) has no input_norm or window
        "--no-norm-before-residual", "--no-norm-before-fc", "--full-attention-indices", "0",
    ]  # fmt: skip
    if args.device == "cpu" or args.eager:  # FlexAttention has no CPU backward and eager it would hold
        # [heads, tokens, tokens x steps] scores; the fused losses are Triton kernels it autotunes
        argv += ["--draft-attn-impl", "sdpa", "--loss-implementation", "eager"]
    return argv + list(args.speculators_args)


class _CountingLoader:
    """speculators' training DataLoader, counting the real tokens (document_ids != -1) of every batch."""

    def __init__(self, loader: Any, record: dict[str, Any]) -> None:
        self._loader, self._record = loader, record

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[Any]:
        began = last = time.monotonic()
        for batch in self._loader:
            self._record["tokens"] += int((batch["document_ids"] != -1).sum())
            self._record["steps"] += 1
            _arm_stall_dump(self._record["stall_s"])  # a batch came: the stall clock starts again
            steps = self._record["steps"]
            now = time.monotonic()
            if steps <= FIRST_BATCHES or steps % PROGRESS_EVERY == 0:
                # speculators' own progress bar (rich) prints nothing until it ends when the output is not
                # a terminal, and its metric lines come every --log-freq steps: this line shows batches coming
                print(
                    f"[driver] batch {steps} handed to the trainer ({self._record['tokens']} tokens, "
                    f"{now - began:.0f} s into this pass, {now - last:.1f} s after the previous batch)",
                    file=sys.stderr,
                    flush=True,
                )
            if steps == 2:  # counted over the whole run: the run's first step, compile included
                self._record["first_step_s"] = round(now - last, 1)
            last = now
            yield batch


def _arm_stall_dump(stall_s: float) -> None:
    """Dump every thread's stack to stderr (the run's log) if no batch comes for `stall_s` seconds, again
    each `stall_s`: this trainer can show no progress for minutes (loader workers, compiling) and nothing
    else says where it waits. Re-arming cancels the pending dump."""
    faulthandler.dump_traceback_later(stall_s, repeat=True, file=sys.stderr)


def _show_compiling() -> None:
    """Log each recompilation and graph break of torch.compile (speculators compiles its forward on a GPU),
    so a long first step reads as compiling in the log, not as a stall."""
    torch._logging.set_logs(recompiles=True, graph_breaks=True)


def _compile_times() -> str:
    """torch.compile's time per compiled function in this process (empty when nothing compiled)."""
    from torch._dynamo.utils import compile_times

    return str(compile_times(repr="str"))[-4000:]


def _now() -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


def _recording_trainer(record: dict[str, Any], device: str) -> type:
    from speculators.train.trainer import Trainer

    class Recording(Trainer):
        def setup_model(self) -> None:
            if device == "cpu":  # trainer.py:221 takes local rank 0 (cuda:0), :228 autocasts on "cuda"
                self.local_rank, self.device_type = cast(int, "cpu"), "cpu"  # `.to("cpu")` at :349, :533
            self.train_loader = cast(Any, _CountingLoader(self.train_loader, record))
            params = list(self.model.named_parameters())
            record["trainable_parameters"] = sum(p.numel() for _, p in params if p.requires_grad)
            record["frozen"] = [name for name, p in params if not p.requires_grad]
            super().setup_model()

        def train_epoch(self, epoch: int, **kwargs: Any) -> None:
            began = _now()
            super().train_epoch(epoch, **kwargs)
            record["epoch_train_s"].append(_now() - began)

        def val_epoch(self, epoch: int) -> dict[str, float] | None:
            began = _now()
            metrics = super().val_epoch(epoch)
            record["val_s"] += _now() - began
            record["val"].append({**(metrics or {}), "epoch": epoch + 1})  # numbered from 1, as eyas's
            if record.get("val_log"):  # as each epoch ends: a run stopped later keeps what it reached
                row = {**_per_position(record["val"][-1]), "train_s": _epoch_s(record)}
                with open(record["val_log"], "a", encoding="utf-8") as log:
                    log.write(json.dumps(row) + "\n")
            return metrics

    return Recording


def _epoch_s(record: dict[str, Any]) -> list[float]:
    return [round(t, 1) for t in record["epoch_train_s"]]


def run_speculators(
    argv: list[str], device: str, stall_s: float = 180.0, val_log: Path | None = None, *, eager: bool = False
) -> dict[str, Any]:
    """speculators' `main(TrainConfig.resolve(argv))`, as `speculators train` runs it, recorded. `eager`:
    with TorchDynamo off, so its `conditional_torch_compile` forward (models/utils.py:71, core.py:192) runs
    as written."""
    import speculators.train.cli as cli
    import speculators.train.trainer as trainer
    from speculators.train.config import TrainConfig

    cfg = TrainConfig.resolve(argv)
    record: dict[str, Any] = {"tokens": 0, "steps": 0, "epoch_train_s": [], "val_s": 0.0, "val": []}
    record["stall_s"], record["val_log"] = stall_s, str(val_log) if val_log else None

    class Unprofiled(trainer._StepTimer):
        def reset(self, enabled: bool) -> None:
            super().reset(False)  # its marks call torch.accelerator.synchronize (trainer.py:80, :92)

    _reset_peak()
    _show_compiling()
    began = _now()
    timer = mock.patch.object(trainer, "_StepTimer", Unprofiled) if device == "cpu" else nullcontext()
    compiler = torch._dynamo.config.patch(disable=True) if eager else nullcontext()
    record["compiled"] = device == "cuda" and not eager  # speculators compiles only where CUDA is
    _arm_stall_dump(stall_s)  # start-up and the first batch (compile, loader workers) count too
    try:
        with mock.patch.object(cli, "Trainer", _recording_trainer(record, device)), timer, compiler:
            cli.main(cfg)
    finally:
        faulthandler.cancel_dump_traceback_later()
    record["wall_s"] = _now() - began
    record["compile_times"] = _compile_times()
    times = record["epoch_train_s"]
    record["train_s"] = sum(times)
    record["tokens_per_s"] = record["tokens"] / record["train_s"]
    if len(times) > 1:  # without the first epoch's torch.compile (core.py:192) and loader start-up
        record["tokens_per_s_after_epoch_1"] = record["tokens"] * (1 - 1 / len(times)) / sum(times[1:])
    record["peak_gpu_bytes"] = _peak()
    record["val"] = [_per_position(epoch) for epoch in record["val"]]
    return record


def _per_position(metrics: dict[str, Any]) -> dict[str, Any]:
    """speculators' `{name}_{k}_epoch` validation metrics as lists by TTT position, and the accept length
    1 + sum_{k<d} full_acc_k at depths 3/5/7 (the formula eyas reports; full_acc_k is the same chain rate)."""
    row: dict[str, Any] = {"epoch": metrics["epoch"], "loss": metrics.get("loss_epoch")}
    for name in ("full_acc", "cond_acc", "loss"):
        pattern = re.compile(rf"{name}_(\d+)_epoch")
        found = {int(m[1]): v for key, v in metrics.items() if (m := pattern.fullmatch(key))}
        row[name if name != "loss" else "loss_by_position"] = [found[k] for k in sorted(found)]
    full = row["full_acc"]
    row["est_accept_len"] = {f"d{d}": 1 + sum(full[:d]) for d in DEPTHS if d <= len(full)}
    return row


def _reset_peak() -> None:
    gc.collect()  # what an earlier run in this process left must not count
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak() -> int | None:
    return int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else None


def run_eyas(args: argparse.Namespace) -> dict[str, Any]:
    """eyas's train stage on the same extraction, settings and validation rows, in this process."""
    from contract.params.train import TrainParams
    from drafting.context import RecordingSink, StageContext
    from drafting.stages import train

    cpu = args.device == "cpu"
    same = "epochs ttt_steps step_decay batch_size max_len lr warmup_ratio seed draft_vocab_size val_fraction"
    values = {key: getattr(args, key) for key in same.split()}
    paths = {"data": args.extraction, "target": args.target, "output": args.out.resolve() / "eyas_run"}
    values |= {key: str(path) for key, path in paths.items()} | {"device": args.device}
    params = TrainParams(**values, dtype="float32" if cpu else "bfloat16", loader_workers=0 if cpu else 2)
    sink = RecordingSink()
    _reset_peak()
    began = _now()
    result = train.run(StageContext(work_dir=args.out.resolve(), sink=sink), params)
    wall = _now() - began
    rates = [e["value"] for e in sink.of_type("metric") if e["name"] == "train/tokens_per_s"]
    val = [
        {
            "epoch": int(e["epoch"]),
            "full_acc": [e[f"val/full_acc_{k}"] for k in range(args.ttt_steps) if f"val/full_acc_{k}" in e],
            "est_accept_len": {f"d{d}": e[f"val/est_accept_len_d{d}"] for d in DEPTHS if d <= args.ttt_steps},
        }
        for e in result.get("epochs", [])
    ]
    mean = sum(rates) / len(rates) if rates else None
    chosen = {"selected": result.get("selected"), "best": result.get("best")}
    return {"wall_s": wall, "tokens_per_s_mean": mean, "peak_gpu_bytes": _peak(), "val": val, **chosen}


def fix_keys(checkpoint: Path, dest: Path, target: Path, sglang_version: str | None = None) -> dict[str, Any]:
    """`eyas fix-keys CHECKPOINT DEST --target TARGET --json` (against `sglang_version`, else the CLI's
    default release): its exit code, its report, the tail of its stderr."""
    argv = ["fix-keys", str(checkpoint), str(dest), "--target", str(target), "--json"]
    if sglang_version is not None:
        argv += ["--sglang-version", sglang_version]
    done = run_child(python_module("cli.main", *argv))
    try:
        report: dict[str, Any] = json.loads("\n".join(done.stdout))
    except json.JSONDecodeError:
        report = {"ok": False, "stdout": "\n".join(done.stdout)[-2000:]}
    return {"returncode": done.result.exit_code, "stderr": "\n".join(done.stderr)[-2000:], "report": report}


def train_main(args: argparse.Namespace) -> int:
    out = args.out.resolve()
    if (out / "checkpoints").exists() or (out / "data").exists():
        raise SystemExit(f"{out} holds an earlier run (speculators would resume from it): use a new OUT")
    out.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(args.extraction)
    if manifest is None:
        raise SystemExit(f"{args.extraction}: no eyas_manifest.json (not an eyas extraction)")
    run: dict[str, Any] = {"extraction": str(args.extraction), "target": str(args.target)}
    run["problems"] = reading_problems(args.extraction, int(manifest["target"]["hidden_size"]))
    if run["problems"]:
        (out / "speculators_run.json").write_text(json.dumps(run, indent=2))
        print("speculators' trainer cannot read this extraction:\n  " + "\n  ".join(run["problems"]))
        return 2
    view = make_view(args.extraction, out / "data", args.val_fraction, args.seed)
    seq_len = total_seq_len(view["lengths"], view["train_rows"], args.batch_size)
    run["argv"] = argv = speculators_argv(args, out / "data", manifest["aux_layers"], seq_len, view["ratio"])
    n_train = len(view["train_rows"])
    run["split"] = {"train": n_train, "val_rows": view["val_rows"]}
    run["settings"] = {"total_seq_len": seq_len, "eyas_steps_per_epoch": -(-n_train // args.batch_size)}
    if args.eyas:
        run["eyas"] = run_eyas(args)
    run["speculators"] = run_speculators(
        argv, args.device, args.stall_s, out / "val_epochs.jsonl", eager=args.eager
    )
    run["settings"]["steps_per_epoch"] = run["speculators"]["steps"] // max(args.epochs, 1)
    run["draft_vocab_same_as_eyas"] = _same_draft_vocab(args, out / "data")
    best = out / "checkpoints" / "checkpoint_best"  # speculators' pick: the lowest validation loss
    checkpoint = best if best.exists() else out / "checkpoints" / str(args.epochs - 1)
    run["checkpoint"] = str(checkpoint.resolve())
    run["sglang_draft"] = str(out / SGLANG_DRAFT)
    run["fix_keys"] = fix_keys(checkpoint, out / SGLANG_DRAFT, args.target, args.sglang_version)
    (out / "speculators_run.json").write_text(json.dumps(run, indent=2))
    print(json.dumps({key: run[key] for key in ("settings", "checkpoint")}, indent=2))
    print(f"SGLang-ready speculators draft: {out / 'sglang_draft'}", flush=True)
    return 0 if run["fix_keys"]["returncode"] == 0 else 1


def _same_draft_vocab(args: argparse.Namespace, view: Path) -> bool:
    """Whether speculators' cached d2t (train/cli.py:387) is eyas's draft vocab from the same token_freq."""
    import numpy as np

    from drafting.ml._dataset import read_token_freq
    from drafting.ml.vocab import d2t_offsets, draft_token_ids

    vocab = int(json.loads((args.target / "config.json").read_text())["vocab_size"])
    ours = d2t_offsets(draft_token_ids(read_token_freq(args.extraction), args.draft_vocab_size, vocab))
    theirs = torch.from_numpy(np.load(view / f"d2t-{args.draft_vocab_size}.npy"))
    return bool(torch.equal(ours, theirs))


OPTIONS: list[tuple[str, type, Any, str | None]] = [
    ("--epochs", int, 6, None),
    ("--ttt-steps", int, 7, None),
    ("--lr", float, 3e-4, None),
    ("--batch-size", int, 32, "eyas's samples per step (sets speculators' --total-seq-len)"),
    ("--max-len", int, 1024, "eyas's max_len (--eyas)"),
    ("--step-decay", float, 0.8, "loss weight of TTT step k: decay**k (eyas's; speculators' default 1.0)"),
    ("--warmup-ratio", float, 0.015, None),
    ("--draft-vocab-size", int, 32000, None),
    ("--val-fraction", float, 0.05, "eyas's held-out split, with --seed"),
    ("--seed", int, 0, None),
    ("--num-workers", int, 8, "speculators' loader processes (spawned)"),
    ("--log-freq", int, 10, "speculators profiles every logged step, synchronizing each phase"),
    ("--stall-s", float, 180.0, "dump every thread's stack to the log after this long without a batch"),
]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = cli.parser(__doc__)
    ours, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser.add_argument("extraction", type=Path, help="an eyas extract output folder")
    parser.add_argument("target", type=Path, help="the target model folder")
    parser.add_argument("out", type=Path, help="run folder (inside WORK with --work)")
    for flag, kind, default, helped in OPTIONS:
        parser.add_argument(flag, type=kind, default=default, help=helped)
    parser.add_argument("--eyas", action="store_true", help="also train eyas's stage here first")
    parser.add_argument(
        "--eager",
        action="store_true",
        help="speculators without torch.compile, with SDPA attention and its eager loss (what it runs on a "
        "CPU): on a GPU its compile of the first step can take minutes",
    )
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--sglang-version", help="the SGLang release fix-keys checks the draft against")
    args = parser.parse_args(ours)
    args.speculators_args = extra
    if args.device == "cpu":
        args.num_workers = 0
    return args


def main() -> None:
    sys.exit(train_main(parse(sys.argv[1:])))


if __name__ == "__main__":
    main()
