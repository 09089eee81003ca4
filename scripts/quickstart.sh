#!/usr/bin/env bash
# Sets up eyas, starts it on the embedded default (SQLite database and broker in ./.eyas, one local worker),
# then runs a real pipeline through its API: a tiny local target → hidden states → a trained EAGLE-3 drafter
# → the SGLang-layout checkpoint and its doctor → a GPU check → offline eval → a depth sweep against the
# reference engine (no GPU needed). eyas keeps running in the foreground afterwards; Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${EYAS_PORT:-8000}
DATA=${EYAS_DATA:-.eyas}
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

echo "== a pipeline on a tiny local target (extract → train → fix_keys → gpu_check → eval → benchmark)"
.venv/bin/eyas demo "$DATA/demo"
.venv/bin/eyas pipeline run eagle3 -f "$DATA/demo/pipeline.json" --wait || echo "the pipeline did not succeed (see above)"

echo "== the benchmark table (CSV)"
BENCH=$(curl -sf "${auth[@]}" "$EYAS_URL/v1/benchmarks?limit=1" | .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)[0]['id'])")
curl -sf "${auth[@]}" "$EYAS_URL/v1/benchmarks/$BENCH?format=csv"

echo
echo "eyas is running at $EYAS_URL (dashboard: $EYAS_URL/, token in $DATA/admin.token); Ctrl-C to stop"
trap 'kill $EYAS_PID 2>/dev/null; wait $EYAS_PID 2>/dev/null' INT TERM
trap - EXIT
wait $EYAS_PID
