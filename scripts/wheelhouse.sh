#!/usr/bin/env bash
# Wheels (Python 3.12, x86_64) that eyas needs on the H200 machine beyond what its image has, for running
# eyas itself there (embedded mode: API + worker on SQLite) next to SGLang. The image already holds torch,
# transformers, safetensors, httpx, typer, rich, psutil, nvidia-ml-py, pandas, pyarrow, prometheus-client;
# the SGLang set (../shared/gpu/build_sglang_h200_wheels.sh) brings pydantic, fastapi, starlette, uvicorn, dill.
# For stage-only runs without the SGLang set (bench/gpu/oom_paths.py, train_stage.py), pass a second folder:
# it gets those (pydantic, pydantic-core, annotated-types, typing-inspection, dill); never carry both sets.
set -euo pipefail
out=${1:?usage: $0 OUT_DIR [STANDALONE_EXTRAS_DIR]}
extras=${2:-}
mkdir -p "$out"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$out" \
  celery==5.7.0 kombu==5.7.0 billiard==4.3.2 vine==5.1.0 amqp==5.4.2 click-didyoumean click-plugins \
  click-repl prompt-toolkit wcwidth tzlocal sqlalchemy==2.1.9 greenlet alembic==1.20.1 mako \
  pydantic-settings==2.16.3 python-dotenv datasets==5.1.0 multiprocess redis==8.1.0 2>&1 | grep -v "is ignored" || true
if [ -n "$extras" ]; then
  mkdir -p "$extras"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d "$extras" \
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 dill==0.4.1 \
    2>&1 | grep -v "is ignored" || true
fi
du -sh "$out" ${extras:+"$extras"}
