"""fix_keys on a multi-GB synthetic drafter: wall time beside `cp`, and the converter's peak memory.

Generates a speculators-layout bf16 checkpoint (`layers.{i}.*`, embed_tokens, fc, lm_head, d2t, t2d;
sharded with an index file) of about --size-gb, then, in the same run, times
  - `cp -r` of the source folder,
  - the streaming converter (`python -m drafting.checkpoint fix`, a subprocess, its own peak RSS),
  - the way existing converters work: load the whole state dict, rename, save (a subprocess).
The draft's hidden size (2048) differs from the target's (4096), so SGLang needs the draft's own
embedding and the converter copies nearly every byte, like cp. The disk of a cloud VM is noisy, so cp and
fix_keys run --repeats times in alternating order and the medians are reported. Prints JSON.

    python -m bench.fix_keys --size-gb 2
    python -m bench.fix_keys --small
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import _cli as cli
from bench._run import python_module, run
from drafting.checkpoint.safetensors_io import MemoryBytes, OutputTensor, encode_header

_PATTERN = os.urandom(16 * 1024 * 1024)  # repeated: random-looking bytes without generating GBs


class _Pattern:
    """bf16 bytes of a synthetic tensor, written in 16 MiB pieces."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes

    def write_to(self, out_fd: int) -> None:
        left = self.nbytes
        while left:
            piece = min(left, len(_PATTERN))
            MemoryBytes(memoryview(_PATTERN)[:piece], piece).write_to(out_fd)
            left -= piece


def _layer(index: int, h: int, inter: int, heads: int, kv: int) -> dict[str, tuple[int, ...]]:
    width = 2 * h if index == 0 else h
    p = f"layers.{index}."
    return {
        p + "self_attn.q_proj.weight": (heads * 128, width),
        p + "self_attn.k_proj.weight": (kv * 128, width),
        p + "self_attn.v_proj.weight": (kv * 128, width),
        p + "self_attn.o_proj.weight": (h, heads * 128),
        p + "mlp.gate_proj.weight": (inter, h),
        p + "mlp.up_proj.weight": (inter, h),
        p + "mlp.down_proj.weight": (h, inter),
        p + "input_layernorm.weight": (h,),
        p + "hidden_norm.weight": (h,),
        p + "post_attention_layernorm.weight": (h,),
    }


def draft_layout(
    size_bytes: int, small: bool
) -> tuple[dict[str, Any], dict[str, tuple[int, ...]], dict[str, Any]]:
    """(draft config, name -> bf16 shape, target config) with enough layers to reach size_bytes."""
    h, inter, heads, kv, vocab, draft_vocab, target_h = (
        (512, 1536, 4, 1, 32000, 8000, 896) if small else (2048, 8192, 16, 4, 128256, 32000, 4096)
    )
    shapes: dict[str, tuple[int, ...]] = {
        "embed_tokens.weight": (vocab, h),
        "fc.weight": (h, 3 * target_h),
        "norm.weight": (h,),
        "lm_head.weight": (draft_vocab, h),
    }
    layers = 0
    while layers < 1 or 2 * sum(_numel(s) for s in shapes.values()) < size_bytes:
        shapes.update(_layer(layers, h, inter, heads, kv))
        layers += 1
    layer_config = {
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": inter,
        "num_attention_heads": heads,
    }
    layer_config |= {
        "num_key_value_heads": kv,
        "head_dim": 128,
        "num_hidden_layers": layers,
        "vocab_size": vocab,
    }
    config = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "transformer_layer_config": layer_config | {"max_position_embeddings": 131072, "rms_norm_eps": 1e-5},
        "draft_vocab_size": draft_vocab,
        "target_hidden_size": target_h,
        "eagle_aux_hidden_state_layer_ids": [2, 30, 58],
    }
    target = {
        "hidden_size": target_h,
        "vocab_size": vocab,
        "num_hidden_layers": 61,
        "max_position_embeddings": 131072,
    }
    return config, shapes, target


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def generate(folder: Path, size_bytes: int, small: bool, shard_bytes: int) -> tuple[int, Path]:
    """Write the synthetic source checkpoint (sharded, with index) and a target config."""
    config, shapes, target = draft_layout(size_bytes, small)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    vocab, draft_vocab = target["vocab_size"], config["draft_vocab_size"]
    tensors = [OutputTensor(n, "BF16", s, _Pattern(2 * _numel(s))) for n, s in sorted(shapes.items())]
    tensors += [
        OutputTensor(
            "d2t", "I64", (draft_vocab,), MemoryBytes(memoryview(bytes(8 * draft_vocab)), 8 * draft_vocab)
        )
    ]
    tensors += [OutputTensor("t2d", "BOOL", (vocab,), MemoryBytes(memoryview(bytes(vocab)), vocab))]
    shards: list[list[OutputTensor]] = [[]]
    for tensor in tensors:
        if shards[-1] and sum(t.source.nbytes for t in shards[-1]) + tensor.source.nbytes > shard_bytes:
            shards.append([])
        shards[-1].append(tensor)
    weight_map = {}
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        with (folder / name).open("wb") as fh:
            fh.write(encode_header(shard))
            fh.flush()
            for tensor in shard:
                tensor.source.write_to(fh.fileno())
        weight_map.update(dict.fromkeys((t.name for t in shard), name))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    target_dir = folder.parent / "target"
    target_dir.mkdir()
    (target_dir / "config.json").write_text(json.dumps(target | {"architectures": ["DeepseekV3ForCausalLM"]}))
    return sum(t.source.nbytes for t in tensors), target_dir


def timed(argv: list[str]) -> tuple[float, list[str]]:
    started = time.perf_counter()
    ran = run(argv)
    elapsed = time.perf_counter() - started
    if not ran.ok:
        raise SystemExit(f"{argv[:4]} failed ({ran.result.exit_code}):\n{ran.tail()}")
    return elapsed, ran.stdout


def load_whole(source: Path, dest: Path) -> None:
    """What existing converters do: every tensor in memory, rename, save_file (child process mode)."""
    from safetensors.torch import load_file, save_file

    state = {}
    for path in sorted(source.glob("*.safetensors")):
        state.update(load_file(path))
    renamed = {k.replace("layers.0.", "midlayer."): v for k, v in state.items() if k != "t2d"}
    dest.mkdir()
    save_file(renamed, dest / "model.safetensors", metadata={"format": "pt"})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    sys.stdout.write(json.dumps({"peak_rss_bytes": peak}) + "\n")


def bench(size_gb: float, small: bool, workdir: Path, repeats: int, skip_whole: bool) -> dict[str, Any]:
    size = int(0.2 * 1024**3) if small else int(size_gb * 1024**3)
    source = workdir / "source"
    source_bytes, target = generate(source, size, small, shard_bytes=(64 if small else 1024) * 1024**2)
    os.sync()  # the generator's dirty pages must not be flushed during the timed runs
    samples: dict[str, list[float]] = {"cp": [], "cp_then_sync": [], "fix_keys": []}
    report: dict[str, Any] = {}
    for round_ in range(repeats):
        for step in ("cp", "fix") if round_ % 2 == 0 else ("fix", "cp"):
            if step == "cp":
                cp_s, sync_s = _run_cp(source, workdir / "cp-copy")
                samples["cp"].append(cp_s)
                samples["cp_then_sync"].append(cp_s + sync_s)
            else:
                fix_s, report = _run_fix(source, workdir / "fixed", target)
                samples["fix_keys"].append(fix_s)
    out: dict[str, Any] = {
        "source_bytes": source_bytes,
        "converter_bytes_written": report["bytes_written"],
        "tensors": len(report["kept"]) + len(report["renamed"]) + len(report["dropped"]),
        "repeats": repeats,
        **{f"{name}_s_median": round(statistics.median(v), 2) for name, v in samples.items()},
        **{f"{name}_s_all": [round(x, 2) for x in v] for name, v in samples.items()},
        "fix_keys_peak_rss_mib": round(report["peak_rss_bytes"] / 1024**2, 1),
        "doctor_ok": report["ok"],
    }
    fix_median = statistics.median(samples["fix_keys"])
    out["fix_keys_over_cp"] = round(fix_median / statistics.median(samples["cp"]), 2)
    out["fix_keys_over_cp_then_sync"] = round(fix_median / statistics.median(samples["cp_then_sync"]), 2)
    if not skip_whole:
        whole_s, whole_lines = timed(
            python_module("bench.fix_keys", "--child-load-whole", str(source), str(workdir / "whole"))
        )
        out["load_whole_s"] = round(whole_s, 2)
        out["load_whole_peak_rss_mib"] = round(json.loads(whole_lines[-1])["peak_rss_bytes"] / 1024**2, 1)
    return out


def _run_cp(source: Path, dest: Path) -> tuple[float, float]:
    cp_s, _ = timed(["cp", "-r", str(source), str(dest)])
    sync_s, _ = timed(["sync"])  # cp leaves its data in the page cache; fix_keys fsyncs before the rename
    shutil.rmtree(dest)
    os.sync()
    return cp_s, sync_s


def _run_fix(source: Path, dest: Path, target: Path) -> tuple[float, dict[str, Any]]:
    argv = [
        sys.executable,
        "-m",
        "drafting.checkpoint",
        "fix",
        str(source),
        str(dest),
        "--target",
        str(target),
    ]
    fix_s, lines = timed([*argv, "--sglang-version", "0.5.14", "--json"])
    shutil.rmtree(dest)
    os.sync()
    return fix_s, json.loads("\n".join(lines))


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--size-gb", type=float, default=4.0, help="source checkpoint size (default 4)")
    parser.add_argument("--small", action="store_true", help="~200 MB, small shapes: a quick check")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument("--repeats", type=int, default=3, help="cp/fix_keys rounds, alternating order")
    parser.add_argument(
        "--skip-load-whole", action="store_true", help="do not run the load-everything baseline"
    )
    parser.add_argument("--child-load-whole", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_load_whole:
        load_whole(*args.child_load_whole)
        return
    workdir = Path(tempfile.mkdtemp(prefix="bench-fix-keys-", dir=args.workdir))
    try:
        result = bench(args.size_gb, args.small, workdir, args.repeats, args.skip_load_whole)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["size_gb_requested"] = 0.2 if args.small else args.size_gb
    sys.stdout.write(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
