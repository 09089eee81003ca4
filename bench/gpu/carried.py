"""A GPU run's generated conversations, kept past the lent machine.

Generate is the journey's longest and most host-dependent step: 16,000 conversations took 824 s on the
ninth run's H200 host against ~390 s predicted from the eighth's, and the machine went back (30 s idle)
before train ended, taking everything under /tmp with it. Its output is small once compressed, so every
`real_model.py` call that sees generate done copies the training and held-out conversations to OUT
(gzip, in parts under the device's 16 MiB a file); a later session carries them back and starts its
pipeline from them (`start --carried DIR`: `data` and `held_out.conversations`, no generate step).
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

PART_BYTES = 15 * 2**20  # the device returns files of at most 16 MiB, 8 a call
TRAINING, HELD_OUT = "conversations.jsonl", "held_out.jsonl"


class GeneratedSaver:
    """Copies the pipeline's generated conversations to OUT once both generate steps have succeeded (the
    device empties OUT before every call, so each call's saver copies them again)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.saved = False

    def __call__(self, pipeline: dict[str, Any]) -> None:
        if self.saved:
            return
        outputs = {j["pipeline_step"]: j for j in pipeline["jobs"] if j["kind"] == "generate"}
        if not outputs or any(j["state"] != "succeeded" for j in outputs.values()):
            return
        self.out.mkdir(parents=True, exist_ok=True)
        for step, name in (("generate", TRAINING), ("generate_held_out", HELD_OUT)):
            if step in outputs:
                written = save(Path(outputs[step]["result"]["output"]), self.out, name)
                print(f"{step}'s conversations to OUT: {', '.join(written)}", flush=True)
        self.saved = True


def write_parts(data: bytes, out: Path, name: str) -> list[bytes]:
    """`data` as OUT/NAME.part0, .part1, … of at most PART_BYTES each (what the device returns); the parts."""
    parts = [data[start : start + PART_BYTES] for start in range(0, len(data), PART_BYTES)]
    for index, part in enumerate(parts):
        (out / f"{name}.part{index}").write_bytes(part)
    return parts


def save(source: Path, out: Path, name: str) -> list[str]:
    """`source` gzipped (no timestamp: the same conversations give the same bytes) to OUT/NAME.gz.partN."""
    parts = write_parts(gzip.compress(source.read_bytes(), mtime=0), out, f"{name}.gz")
    return [f"{name}.gz.part{index}" for index in range(len(parts))]


def unpack(carried: Path, work: Path) -> tuple[Path, Path]:
    """The carried conversations, whole again, in WORK/carried (inside the host's allowed root); gzip's
    checksum refuses a part missing or damaged."""
    folder = work / "carried"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in (TRAINING, HELD_OUT):
        parts = sorted(carried.glob(f"{name}.gz.part*"), key=lambda p: int(p.name.rsplit("part", 1)[1]))
        if not parts:
            raise SystemExit(f"--carried {carried}: no {name}.gz.part* there")
        paths.append(folder / name)
        paths[-1].write_bytes(gzip.decompress(b"".join(p.read_bytes() for p in parts)))
    return paths[0], paths[1]


def carried_spec(spec: dict[str, Any], training: Path, held_out: Path, answer_tokens: int) -> dict[str, Any]:
    """The GPU recipe's spec on carried conversations: `data` instead of generate, the held-out set as
    conversations already answered, served with the budget they were answered with."""
    carried = {k: v for k, v in spec.items() if k not in ("generate", "held_out")}
    held = {"conversations": str(held_out), "serve": True, "max_new_tokens": answer_tokens}
    return carried | {"data": str(training), "held_out": held}
