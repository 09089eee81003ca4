#!/usr/bin/env bash
# Wheels (Python 3.12, x86_64) that speculators 0.9.0's trainer needs on the H200 machine beyond the image, the
# eyas set (pack_wheels.sh) and the SGLang set (../shared/gpu/build_sglang_h200_wheels.sh), for
# bench/gpu/speculators_side_by_side.py. speculators' Requires-Dist (`unzip -p speculators-*.whl '*/METADATA'`):
#   image: aiohttp click httpx huggingface-hub numpy protobuf psutil rich safetensors torch torchaudio
#          torchvision tqdm transformers typer
#   eyas set: datasets pydantic-settings          SGLang set: loguru openai pydantic (+ openai's jiter, distro,
#          sniffio; anyio is in the image)
#   here: speculators 0.9.0 and hs-connectors 0.9.0 (hs-connectors needs only safetensors and torch)
# speculators imports openai (train/data.py:8) and loguru (utils/loading.py:8) when its trainer loads, so a run
# without the SGLang set needs a second folder: pass STANDALONE_EXTRAS_DIR for openai, jiter, distro, sniffio
# and loguru at the SGLang set's versions, with pack_wheels.sh's extras for pydantic. Never carry that folder
# beside the SGLang set: two copies of one wheel stop the install.
set -euo pipefail
out=${1:?usage: $0 OUT_DIR [STANDALONE_EXTRAS_DIR]}
extras=${2:-}
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$@" 2>&1 | grep -v "is ignored" || true; }
mkdir -p "$out"
dl "$out" speculators==0.9.0 hs-connectors==0.9.0
for wheel in "$out"/speculators-0.9.0-*.whl "$out"/hs_connectors-0.9.0-*.whl; do
  [ -f "$wheel" ] || { echo "missing: $wheel" >&2; exit 1; }
  echo "$(basename "$wheel") requires:" $(unzip -p "$wheel" '*/METADATA' | grep '^Requires-Dist' \
    | grep -v 'extra ==' | sed 's/Requires-Dist: //; s/[<>=!~;[ ].*//' | sort -u)
done
if [ -n "$extras" ]; then
  mkdir -p "$extras"
  dl "$extras" openai==2.6.1 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 loguru==0.7.3
fi
du -sh "$out" ${extras:+"$extras"}
du -cb "$out"/*.whl | tail -1 | awk '{printf "speculators set: %.2f MiB (the eyas + SGLang sets: ~43 MiB of the 64 MiB a call carries)\n", $1/1048576}'
