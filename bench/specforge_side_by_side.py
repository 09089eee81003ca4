"""SpecForge 0.2.0's own EAGLE-3 trainer on an eyas extraction, beside eyas's trainer.

What SpecForge's offline trainer needs, read in the installed 0.2.0 (paths inside the package):

- `specforge train -c RUN.yaml` (cli.py:172-198) with `data.hidden_states_path` reads every `*.ckpt` below
  it (runtime/data_plane/offline_reader.py:44,72-82): a `torch.save` dict per sample of `input_ids` [seq],
  `loss_mask` [seq], `hidden_state` [1, seq, H] and `aux_hidden_state` [1, seq, 3H]. Its TargetHead is the
  lm_head alone (modeling/target/target_head.py:31,100-101), so `hidden_state` is the last layer *after*
  the final norm; it shifts ids and targets itself (target_head.py:103-108).
- eyas stores `hidden_states` [seq, 4, H] per sample, the 4th the last layer *before* the final norm
  (drafting/ml/hidden_store.py). `convert` applies the target's RMSNorm as the target does (statistics in
  float32, cast back, then the weight) and concatenates the 3 aux states low to high.
- TargetHead finds the lm_head through a `*.index.json` (target_head.py:71-84): `target_view` is the target
  seen through links plus an index; a tied target (SmolLM2) names its embedding as the head
  (`model.lm_head_key`).
- The draft vocabulary is eyas's (drafting/ml/vocab.py), given as SpecForge's vocab mapping
  (`model.vocab_mapping_path`, {"d2t", "t2d"}): SpecForge's own pick breaks ties in another order.
- The drafter's config is eyas's `drafter_config` (same aux layers, same draft vocab size); eyas's
  validation rows (`split_indices`, same fraction and seed) go to `data.eval_hidden_states_path`.
- `specforge export --to sglang` (cli.py:199-212) writes SGLang's layout; `eyas fix-keys` then checks it.

On the GPU host SpecForge needs only its own wheel (pure Python) installed `--no-deps`: its pins
(transformers 5.8.1) would replace the host's (`scripts/wheelhouse.sh --with specforge` for a host
without network). On a CPU (`--device cpu`, tests) the one CUDA-only piece, its
Triton KL loss (core/loss.py:185), is replaced by the reference SpecForge ships beside it
(core/loss.py:15-21), run eagerly: the stand-in for a kernel that cannot run here, nothing else.

    python -m bench.specforge_side_by_side EXTRACTION TARGET WORK --epochs 10 --lr 1e-3 --ttt-steps 7
        [--batch-size 1] [--max-len 2048] [--device cpu]
    # WORK/specforge_run.json: times, samples/s, peak GPU memory, SpecForge's logged metrics, fix-keys'
    # report; WORK/sglang_draft: the draft, for `python -m bench.journey sweep --draft WORK/sglang_draft`
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench import _cli as cli
from bench._run import python_module, run
from bench.speculators_side_by_side import SGLANG_DRAFT, fix_keys
from drafting.ml._config import drafter_config, text_config
from drafting.ml._dataset import read_token_freq
from drafting.ml.hidden_store import read_manifest
from drafting.ml.target_head import read_final_norm, stored_head_names
from drafting.ml.text_model import weight_files
from drafting.ml.train_data import HiddenStateDataset, open_extraction, split_indices
from drafting.ml.vocab import d2t_offsets, draft_token_ids

GROUP = 2000  # samples per folder, as SpecForge's own capture groups them (rows_{g}-{g+2000})
METRIC_LINE = re.compile(r"^step (?P<step>\d+): (?P<metrics>\{.*\})\s*$")


def final_norm(last: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    """The target's own final norm, run in the states' dtype as the target runs it."""
    out: torch.Tensor = norm.to(last.dtype)(last)
    return out


def convert(
    extraction: Path,
    target: Path,
    out: Path,
    val_fraction: float,
    seed: int,
    dtype: torch.dtype = torch.bfloat16,
) -> dict[str, Any]:
    """eyas's samples as SpecForge's `.ckpt` files: training rows under OUT/train, eyas's validation rows
    under OUT/val, in `dtype` (the trainer's: its lm_head is bfloat16 and does not cast its input)."""
    config = json.loads((target / "config.json").read_text())
    norm = read_final_norm(target)  # the norm alone: no 2 GB embedding for an 8B target
    dataset = HiddenStateDataset(open_extraction(extraction, config), max_len=1 << 30)
    train, val = split_indices(len(dataset), val_fraction, seed)
    tokens = {"train": 0, "val": 0}
    for split, rows in (("train", train), ("val", val)):
        for number, row in enumerate(rows):
            sample = dataset[row]
            states = sample["hidden"]  # [seq, 4, H]
            seq, _, hidden = states.shape
            record = {
                "input_ids": sample["input_ids"].long(),
                "loss_mask": sample["loss_mask"].long(),
                "hidden_state": final_norm(states[:, 3], norm).to(dtype)[None],
                "aux_hidden_state": states[:, :3].reshape(seq, 3 * hidden).to(dtype)[None],
            }
            group = number // GROUP * GROUP
            folder = out / split / f"rows_{group}-{group + GROUP}"
            folder.mkdir(parents=True, exist_ok=True)
            partial = folder / f".data_{number}.ckpt.tmp"
            torch.save(
                {k: v.contiguous() for k, v in record.items()}, partial
            )  # not views of the stored rows
            partial.replace(folder / f"data_{number}.ckpt")
            tokens[split] += seq
    return {"train_rows": len(train), "val_rows": len(val), "tokens": tokens}


def target_view(target: Path, view: Path) -> str:
    """The target through links, with an index naming each tensor's file (SpecForge reads the lm_head by
    it); the tensor eyas's trainer reads as the lm_head (a tied target's embedding), for SpecForge's too."""
    files = weight_files(target)
    view.mkdir(parents=True, exist_ok=True)
    for path in target.iterdir():
        if not path.name.endswith(".index.json") and not (view / path.name).exists():
            (view / path.name).symlink_to(path.resolve())
    index = {"metadata": {}, "weight_map": {name: file.name for name, file in files.items()}}
    (view / "model.safetensors.index.json").write_text(json.dumps(index))
    return stored_head_names(target)["lm_head"]


def vocab_mapping(extraction: Path, target_config: dict[str, Any], draft_vocab: int, path: Path) -> None:
    """eyas's draft vocabulary as SpecForge's mapping file: d2t offsets and the target-to-draft mask."""
    vocab = int(text_config(target_config)["vocab_size"])
    ids = draft_token_ids(read_token_freq(extraction), draft_vocab, vocab)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[ids] = True
    torch.save({"d2t": d2t_offsets(ids), "t2d": t2d}, path)


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    """WORK/{hs, target, vocab.pt, draft_config.json, run.yaml}: everything `specforge train` reads."""
    work, target = args.work.resolve(), args.target.resolve()
    manifest = read_manifest(args.extraction)
    if manifest is None:
        raise SystemExit(f"{args.extraction} holds no eyas extraction (no eyas_manifest.json)")
    config = json.loads((target / "config.json").read_text())
    began = time.monotonic()
    converted = convert(args.extraction, target, work / "hs", args.val_fraction, args.seed)
    converted["convert_s"] = round(time.monotonic() - began, 1)
    head_key = target_view(target, work / "target")
    vocab_mapping(args.extraction, config, args.draft_vocab_size, work / "vocab.pt")
    draft = drafter_config(
        config, draft_vocab_size=args.draft_vocab_size, aux_layer_ids=manifest["aux_layers"]
    )
    (work / "draft_config.json").write_text(json.dumps(draft, indent=2))
    run = run_config(args, work, head_key)
    (work / "run.yaml").write_text(json.dumps(run, indent=2))  # JSON is YAML: SpecForge reads it with pyyaml
    return {"converted": converted, "lm_head_key": head_key, "run": run}


def run_config(args: argparse.Namespace, work: Path, head_key: str) -> dict[str, Any]:
    return {
        "model": {
            "target_model_path": str(work / "target"),
            "draft_model_config": str(work / "draft_config.json"),
            "vocab_mapping_path": str(work / "vocab.pt"),
            "lm_head_key": head_key,
            "torch_dtype": "bfloat16",
        },
        "data": {
            "hidden_states_path": str(work / "hs" / "train"),
            **(
                {"eval_hidden_states_path": str(work / "hs" / "val")}
                if (work / "hs" / "val").is_dir()
                else {}
            ),
            "max_length": args.max_len,
            "cache_dir": str(work / "cache"),
            "dataloader_num_workers": 0 if args.device == "cpu" else 4,
        },
        "training": {
            "strategy": "eagle3",
            "num_epochs": args.epochs,
            "batch_size": args.batch_size,
            "learning_rate": args.lr,
            "ttt_length": args.ttt_steps,
            "attention_backend": attention_backend(args),
            "fsdp_sharding": "NO_SHARD",
            "log_interval": args.log_interval,
            "eval_interval": args.eval_interval,
            "save_interval": 10**9,  # the final save only (training/trainer.py:528)
            "seed": args.seed,
            **({"max_steps": args.max_steps} if args.max_steps else {}),
        },
        "run_id": "eyas-side-by-side",
        "output_dir": str(work / "out"),
        "deployment": {"mode": "local_colocated", "trainer": {"nnodes": 1, "nproc_per_node": 1}},
    }


def attention_backend(args: argparse.Namespace) -> str:
    """SDPA on a CPU; on a GPU flex attention unless asked otherwise (SpecForge runs it uncompiled below 128
    query tokens, its 0.2.0 modeling/draft/llama3_eagle.py:865-870, so short rows can step slowly)."""
    if args.attention_backend != "auto":
        return str(args.attention_backend)
    return "sdpa" if args.device == "cpu" else "flex_attention"


def specforge(argv: list[str], device: str, log: Path) -> dict[str, Any]:
    """`specforge ARGV` in a child process (this module's `_cli` phase), its output to LOG; wall time, exit
    code and the peak GPU memory the child reports."""
    began = time.monotonic()
    done = run(python_module("bench.specforge_side_by_side", "_cli", device, *argv), log=log)
    peaks = re.findall(r"^eyas-peak-gpu-bytes (\d+)$", log.read_text(errors="replace"), re.MULTILINE)
    return {
        "returncode": done.result.exit_code,
        "wall_s": round(time.monotonic() - began, 1),
        "peak_gpu_bytes": int(peaks[-1]) if peaks else None,
    }


def logged_metrics(log: Path) -> list[dict[str, Any]]:
    """SpecForge's `step N: {...}` lines: training ones (acc_k per TTT position, losses, samples/s) and
    evaluation ones (`eval/per_position_acc`, `eval/simulated_acc_len`, … on the validation rows)."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        match = METRIC_LINE.match(line)
        if match:
            metrics = ast.literal_eval(match["metrics"])
            kind = "eval" if any(key.startswith("eval/") for key in metrics) else "train"
            found.append({"kind": kind, "step": int(match["step"]), **metrics})
    return found


def side_by_side(args: argparse.Namespace) -> dict[str, Any]:
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"prepared": prepare(args)}
    log = work / "specforge.log"
    record["train"] = train = specforge(["train", "--config", str(work / "run.yaml")], args.device, log)
    metrics = logged_metrics(log)
    for kind in ("train", "eval"):
        record[f"{kind}_last"] = next((m for m in reversed(metrics) if m["kind"] == kind), None)
    record["metrics"] = metrics
    if train["returncode"] == 0:
        checkpoint = work / "out" / "eyas-side-by-side-latest"
        export = ["export", "--to", "sglang", "--checkpoint", str(checkpoint)]
        export += ["--draft-config", str(work / "draft_config.json"), "--output-dir", str(work / "exported")]
        record["export"] = specforge(export, args.device, log)
        if record["export"]["returncode"] == 0:
            record["fix_keys"] = fix_keys(
                work / "exported", work / SGLANG_DRAFT, args.target.resolve(), args.sglang_version
            )
    (work / "specforge_run.json").write_text(json.dumps(record, indent=2))
    return record


def _cli(device: str, argv: list[str]) -> int:
    """SpecForge's own CLI in this process; on a CPU with its reference loss in place of the Triton kernel."""
    if device == "cpu":
        import specforge.algorithms.eagle3.model as eagle3
        from specforge.core.loss import _compute_loss

        reference = getattr(_compute_loss, "_torchdynamo_orig_callable", _compute_loss)  # uncompiled

        class ReferenceLoss:
            apply = staticmethod(reference)

        eagle3.LogSoftmaxLoss = ReferenceLoss
    from specforge.cli import main

    code = int(main(argv) or 0)
    if torch.cuda.is_available():
        print(f"eyas-peak-gpu-bytes {torch.cuda.max_memory_allocated()}", flush=True)
    return code


def parse(argv: list[str]) -> argparse.Namespace:
    parser = cli.parser(__doc__)
    parser.add_argument("extraction", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("work", type=Path)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--ttt-steps", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=1, help="SpecForge's per-GPU batch (samples)")
    parser.add_argument("--max-len", type=int, default=2048)
    parser.add_argument("--draft-vocab-size", type=int, default=32000)
    parser.add_argument("--val-fraction", type=float, default=0.05, help="eyas's split, with --seed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: all epochs)")
    parser.add_argument("--log-interval", type=int, default=50)
    parser.add_argument("--eval-interval", type=int, default=500)
    parser.add_argument("--device", default="cuda", help="cpu: tests (SpecForge's reference loss)")
    parser.add_argument("--attention-backend", choices=["auto", "sdpa", "flex_attention"], default="auto")
    parser.add_argument("--sglang-version", help="the SGLang release fix-keys checks the draft against")
    return parser.parse_args(argv)


def main() -> None:
    if sys.argv[1:2] == ["_cli"]:
        raise SystemExit(_cli(sys.argv[2], sys.argv[3:]))
    record = side_by_side(parse(sys.argv[1:]))
    print(json.dumps({k: record.get(k) for k in ("train", "export", "train_last", "eval_last")}), flush=True)


if __name__ == "__main__":
    main()
