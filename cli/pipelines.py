"""`eyas pipeline …` (the whole journey in one request) and `eyas demo` (local toy assets to try it on)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from cli.client import EXIT_TIMEOUT, Api, exit_code_for, load_json_object, parse_uuid
from cli.remote import DEFAULT_URL, JsonOpt, TokenOpt, UrlOpt, console

pipeline = typer.Typer(
    no_args_is_help=True,
    help="the whole journey in one request: generate → generate_held_out → extract → extract_held_out → "
    "train → fix_keys → gpu_check → eval → serve_held_out → benchmark. generate runs when the spec starts "
    "from prompts, the *_held_out steps when it has a held_out set (docs/pipelines.md).",
)


@pipeline.command("run")
def run(
    template: Annotated[str, typer.Argument(help="pipeline template (eagle3)")],
    file: Annotated[
        Path,
        typer.Option(
            "-f",
            "--file",
            help="JSON spec: target, data or generate, held_out, workdir, host, each step's params",
        ),
    ],
    wait: Annotated[bool, typer.Option(help="wait for the end and exit with its outcome")] = False,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a pipeline. With --wait: exit 0 succeeded, 1 failed, 3 cancelled."""
    spec = {**load_json_object(file), "template": template}
    api = Api(url, token)
    created = api.json("POST", "/v1/pipelines", json=spec)
    if not wait:
        _print(created, as_json)
        return
    _wait(api, created["id"], as_json, timeout=0)


@pipeline.command("status")
def status(
    pipeline_id: str,
    watch: Annotated[
        bool, typer.Option("--wait", help="follow until it ends; exit with its outcome")
    ] = False,
    timeout: Annotated[
        float, typer.Option(help="with --wait: give up after this many seconds (0 = never)")
    ] = 0,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a pipeline's steps. With --wait: exit 0 succeeded, 1 failed, 3 cancelled, 4 timed out."""
    api = Api(url, token)
    if watch:
        _wait(api, pipeline_id, as_json, timeout)
    _print(api.json("GET", f"/v1/pipelines/{_uuid(pipeline_id)}"), as_json)


@pipeline.command("cancel")
def cancel(
    pipeline_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Cancel the running and waiting steps."""
    _print(Api(url, token).json("POST", f"/v1/pipelines/{_uuid(pipeline_id)}/cancel"), as_json)


@pipeline.command("retry")
def retry(
    pipeline_id: str,
    from_step: Annotated[
        str | None, typer.Option(help="run again from this step (default: the failed one)")
    ] = None,
    changes: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="change a step param: SECTION.KEY=VALUE, VALUE as JSON (else a string), e.g. "
            "train.compile=false; repeatable",
        ),
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run again from the failed step (or --from-step), reusing what the steps before it produced."""
    body: dict[str, Any] = {"params": param_changes(changes or [])}
    if from_step is not None:
        body["from_step"] = from_step
    path = f"/v1/pipelines/{_uuid(pipeline_id)}/retry"
    _print(Api(url, token).json("POST", path, json=body), as_json)


def param_changes(changes: list[str]) -> dict[str, dict[str, Any]]:
    """SECTION.KEY=VALUE settings as a pipeline retry's `params` (VALUE as JSON, else as a string)."""
    params: dict[str, dict[str, Any]] = {}
    for change in changes:
        name, sep, raw = change.partition("=")
        section, dot, key = name.partition(".")
        if not (sep and dot and section and key):
            raise typer.BadParameter(f"{change!r}: expected SECTION.KEY=VALUE", param_hint="--set")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        params.setdefault(section, {})[key] = value
    return params


def _wait(api: Api, pipeline_id: str, as_json: bool, timeout: float) -> None:
    deadline = time.monotonic() + timeout if timeout else None
    path = f"/v1/pipelines/{_uuid(pipeline_id)}"
    last = ""
    with console.status("waiting…", spinner="dots") as spinner:
        while True:
            current = api.json("GET", path)
            line = "  ".join(f"{j['pipeline_step']}:{_pct(j)}" for j in current["jobs"])
            if line != last and not as_json:
                spinner.update(f"{current['state']}  {line}")
                last = line
            if current["state"] in ("succeeded", "failed", "cancelled"):
                break
            if deadline is not None and time.monotonic() >= deadline:
                _print(current, as_json)
                raise typer.Exit(EXIT_TIMEOUT)
            time.sleep(2)
    _print(current, as_json)
    raise typer.Exit(exit_code_for(current["state"]))


def _pct(job: dict[str, Any]) -> str:
    """A running step's progress, else its state (for the one-line summary while waiting)."""
    progress = _percent(job)
    return progress if job["state"] == "running" and progress else str(job["state"])


def _percent(job: dict[str, Any]) -> str:
    return f"{job['progress'] * 100:.0f}%" if job.get("progress") is not None else ""


def _print(current: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(current, indent=2))
        return
    console.print(
        f"pipeline {current['id']}: [bold]{current['state']}[/bold]"
        + (f" (failed at {current['failed_step']})" if current.get("failed_step") else "")
    )
    table = Table("step", "job", "state", "progress", "reason", "message")
    for job in current["jobs"]:
        table.add_row(
            job.get("pipeline_step") or job["kind"],
            job["id"][:8],
            job["state"],
            _percent(job),
            job.get("termination_reason") or "",
            (job.get("message") or "")[:80],
        )
    console.print(table)


def _uuid(value: str) -> str:
    return parse_uuid(value, "pipeline")


DEMO_FOLDER = ".eyas-demo"
DEMO_FOLDER_HELP = (
    f"where to write the target, prompts/data and pipeline.json (default: {DEMO_FOLDER} in the working "
    "directory, a root `eyas up` lets jobs use; never inside the data dir, where no job may write)"
)


def demo(
    folder: Annotated[Path | None, typer.Argument(help=DEMO_FOLDER_HELP, show_default=False)] = None,
    host: Annotated[str | None, typer.Option(help="host the pipeline runs on")] = None,
    target: Annotated[
        str,
        typer.Option(
            help="tiny: a constructed toy target (built in seconds, ~2 min pipeline; plumbing only); "
            "smollm2: the real SmolLM2-135M-Instruct built from its installed package (~20 s once on quiet "
            "cores, up to a minute on busy ones, then cached; ~10 min pipeline); qwen2.5-coder-1.5b: the "
            "real Qwen2.5-Coder-1.5B-Instruct joined from its 22 installed parts (~4 min once, then cached; "
            "docs/real-models.md)"
        ),
    ] = "tiny",
    gguf: Annotated[
        Path | None,
        typer.Option(
            help="a real target: build from this GGUF file instead of the package's (qwen2.5-coder-1.5b: "
            "or a folder of its 22 parts, part01.bin … part22.bin)"
        ),
    ] = None,
    gpu: Annotated[
        bool,
        typer.Option(
            "--gpu",
            help="--target smollm2: the GPU recipe (SGLang; 16,000 self-prompted conversations, lr 1e-3 x 10 "
            "epochs; on one H200 it served 3.04 at depth 5 on 72 MT-Bench questions) instead of the CPU one",
        ),
    ] = False,
) -> None:
    """Write a local target, its data and a pipeline.json for them (CPU reference engine, or --gpu)."""
    if folder is None:
        # Beside the data dir, never inside it: no job may write where the database lives.
        folder = Path(DEMO_FOLDER)
    folder = folder.resolve()
    if gpu and target == "tiny":
        typer.echo("error: --gpu is the real target's GPU recipe: add --target smollm2", err=True)
        raise typer.Exit(2)
    if target == "tiny":
        from cli.demo.constructed import demo_pipeline_spec, write_demo

        assets = write_demo(folder)
        spec = demo_pipeline_spec(assets, workdir=str(folder / "runs"))
        wrote = "target, chats.jsonl, prompts.jsonl"
    else:
        spec, wrote = _real_demo(folder, target, gguf, gpu)
    if host:
        spec["host"] = host
    (folder / "pipeline.json").write_text(json.dumps(spec, indent=2))
    roots = (
        "its paths must lie under the worker host's allowed roots (eyas up allows its working directory "
        "and data dir; --allow-root adds others; GET /v1/hosts lists each host's)"
    )
    if gpu:
        typer.echo(
            f"wrote {wrote} and pipeline.json (the GPU recipe, docs/real-models.md) in {folder}\n"
            f"run it on a GPU host with SGLang: eyas pipeline run eagle3 -f {folder}/pipeline.json --wait\n"
            f"({roots})"
        )
        return
    typer.echo(
        f"wrote {wrote} and pipeline.json in {folder}\n"
        f"run it: eyas pipeline run eagle3 -f {folder}/pipeline.json --wait\n"
        f"({roots}; its release gate requires no speedup: the CPU reference engine is slower than plain "
        "decoding; with SGLang on a GPU keep the default threshold 1.0)"
    )


def _real_demo(folder: Path, target: str, gguf: Path | None, gpu: bool) -> tuple[dict[str, Any], str]:
    from cli.demo.real import demo_pipeline_spec, demo_prompt_counts, write_real_demo
    from drafting.realmodels import REAL_TARGETS, TargetBuildError

    if target not in REAL_TARGETS:
        typer.echo(f"error: --target must be tiny or one of {', '.join(REAL_TARGETS)}", err=True)
        raise typer.Exit(2)
    typer.echo(f"building {REAL_TARGETS[target].description} into {folder}/target (once; then cached)")
    try:
        asked, held_out = demo_prompt_counts(target, gpu)
        assets = write_real_demo(folder, target=target, gguf=gguf, held_out=held_out, eval_prompts=asked)
    except TargetBuildError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"target: {assets['target']} ({assets['built']})")
    spec = demo_pipeline_spec(target, assets, workdir=str(folder / "runs"), gpu=gpu)
    return spec, "target, train_prompts.jsonl, mtbench_eval.jsonl, mtbench_held_out.jsonl"
