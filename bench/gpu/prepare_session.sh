#!/usr/bin/env bash
# What a GPU session carries to the H200, made here before its first call (no device time spent): the wheel
# sets, the SmolLM2 GGUF in three parts (a call carries 64 MiB), MT-Bench's questions, the yardstick, and the
# conversations an earlier run generated (bench/gpu/carried_data, checked). docs/gpu/RUNBOOK.md says which
# call carries what. Idempotent: wheel sets already made are kept; the parts are made again.
#   bash bench/gpu/prepare_session.sh [CARRIED_DATA_DIR]     (default: bench/gpu/carried_data/run11)
set -euo pipefail
cd "$(dirname "$0")/../.."
carried=${1:-bench/gpu/carried_data/run11}
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.whl/' "$exclude" 2>/dev/null || printf '/.whl/\n/.devrun/\n' >> "$exclude"
[ -x .venv/bin/python ] || bash scripts/setup.sh
[ -d .whl/sglang ] || bash ../shared/gpu/build_sglang_h200_wheels.sh "$PWD/.whl/sglang"
[ -d .whl/eyas ] || bash bench/gpu/pack_wheels.sh .whl/eyas
[ -d .whl/extra ] || .venv/bin/python -m pip download -q --no-deps accelerate==1.15.0 -d .whl/extra
[ -d .whl/speculators ] || bash bench/gpu/pack_speculators_wheels.sh .whl/speculators
[ -d .whl/specforge ] || bash bench/gpu/pack_specforge_wheels.sh .whl/specforge
gguf=$(find .venv -name 'SmolLM2-135M-Instruct.Q4_1.gguf' | head -1)
questions=$(find .venv -path '*mt_bench/question.jsonl' | head -1)
[ -n "$gguf" ] && [ -n "$questions" ] || { echo "the SmolLM2 GGUF or MT-Bench is missing: run scripts/setup.sh" >&2; exit 1; }
mkdir -p .devrun/p1 .devrun/p2 .devrun/p3 .devrun/y
part() { dd if="$gguf" of="$1" bs=4M iflag=skip_bytes,count_bytes skip="$2" ${3:+count="$3"} status=none; }
# A call carries 64 MiB with the working tree (8.4 MB with bench/gpu/carried_data): call A the 45.5 MB of
# wheels and part 1, call B part 2, call C the rest with MT-Bench (and room for nothing as large as a draft)
part .devrun/p1/part1 0 11000000
part .devrun/p2/part2 11000000 56000000
part .devrun/p3/part3 67000000
cat .devrun/p1/part1 .devrun/p2/part2 .devrun/p3/part3 | cmp -s - "$gguf" || { echo "GGUF parts differ" >&2; exit 1; }
cp "$questions" .devrun/p3/question.jsonl
cp ../shared/gpu/drafter_step_bench.py .devrun/y/
gzip -t "$carried"/*.gz.part0   # call C reads it from the tree: start --carried $carried
tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
for call in "A .whl .devrun/p1" "B .devrun/p2" "C .devrun/p3"; do
  set -- $call; name=$1; shift
  total=$(( tree + $(du -cb "$@" | tail -1 | cut -f1) ))
  echo "call $name carries $total bytes with the tree (the limit: 67108864)"
  [ "$total" -le 67108864 ] || { echo "call $name is over the 64 MiB a call carries" >&2; exit 1; }
done
