#!/usr/bin/env bash
# The whole test suite: installs what it needs, starts PostgreSQL and Redis if they are down, then
# ruff (format + lint), mypy and pytest. Extra arguments go to pytest (e.g. -k dispatch, -m slow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/services.sh
# docker-compose validates docker-compose.yml in the tests (no Docker engine runs here; nothing starts)
# Debian's Chromium drives the dashboard tests (never `playwright install`: no downloads of browsers here)
command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
command -v docker-compose >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null; } || true
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/mypy app contract drafting workers cli testsupport
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
if [[ $status -eq 5 ]]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit $status
