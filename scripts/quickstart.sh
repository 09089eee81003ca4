#!/usr/bin/env bash
# Sets up eyas, starts it on the embedded default, and drives real jobs through it with curl.
# eyas keeps running in the foreground afterwards; Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${EYAS_PORT:-8000}
DATA=${EYAS_DATA:-.eyas}
bash scripts/setup.sh
.venv/bin/eyas up --port "$PORT" --data-dir "$DATA" &
EYAS_PID=$!
trap 'kill $EYAS_PID 2>/dev/null; wait $EYAS_PID 2>/dev/null' INT TERM
URL=http://127.0.0.1:$PORT
for _ in $(seq 300); do
  curl -sf "$URL/readyz" >/dev/null 2>&1 && break
  kill -0 $EYAS_PID 2>/dev/null || { echo "eyas up exited" >&2; exit 1; }
  sleep 0.2
done
TOKEN=$(cat "$DATA/admin.token")
api() { curl -sf -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' "$@"; }
field() { .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)$1)"; }

echo "== the host, as its worker reports it"
api "$URL/v1/hosts" | field '[0]["gpu_error"] or "GPUs found"'

echo "== gpu_check"
CHECK=$(api -d '{"kind": "gpu_check", "params": {}}' "$URL/v1/jobs" | field '["id"]')
api "$URL/v1/jobs/$CHECK/wait?timeout=120" | field '["state"], "verdict:", d["result"]["verdict"]' 2>/dev/null \
  || api "$URL/v1/jobs/$CHECK/wait?timeout=120" | field '["state"]'

echo "== selftest, then its log"
JOB=$(api -d '{"kind": "selftest", "params": {"lines": 5, "sleep_s": 1}}' "$URL/v1/jobs" | field '["id"]')
api "$URL/v1/jobs/$JOB/wait?timeout=120" | field '["state"]'
api "$URL/v1/jobs/$JOB/logs?format=text"

echo "eyas is running at $URL (token in $DATA/admin.token); Ctrl-C to stop"
wait $EYAS_PID
