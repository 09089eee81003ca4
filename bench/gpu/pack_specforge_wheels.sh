#!/usr/bin/env bash
# The wheel SpecForge 0.2.0's offline trainer needs on the H200 machine beyond the image, the eyas set
# (pack_wheels.sh), the SGLang set (../shared/gpu/build_sglang_h200_wheels.sh) and accelerate (the RUNBOOK's
# .whl/extra), for bench/gpu/specforge_side_by_side.py: specforge itself, pure Python. Install it --no-deps:
# its pins (transformers==5.8.1, torch==2.11.0, sglang==0.5.14) would replace the host's transformers 5.17.
# What its offline path imports (helper-25 traced it on this machine, docs/training.md "SpecForge side by
# side"): torch, triton (core/loss.py), transformers, accelerate, datasets, pydantic, pyyaml, safetensors,
# huggingface_hub, numpy, tqdm, psutil; yunchang, wandb, tensorboard, openai-harmony and flash-attn only on
# paths it does not take (sequence parallelism, trackers, flash attention).
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
mkdir -p "$out"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform any -d "$out" specforge==0.2.0 2>&1 | grep -v "is ignored" || true
[ -f "$out"/specforge-0.2.0-py3-none-any.whl ] || { echo "missing: specforge-0.2.0-py3-none-any.whl" >&2; exit 1; }
du -cb "$out"/*.whl | tail -1 | awk '{printf "specforge set: %.2f MiB\n", $1/1048576}'
