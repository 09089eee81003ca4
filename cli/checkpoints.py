"""Local checkpoint commands (no server needed): `eyas doctor` and `eyas fix-keys`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from cli.client import EXIT_USAGE

TargetOpt = Annotated[Path | None, typer.Option("--target", help="target model folder or its config.json")]
VersionOpt = Annotated[str, typer.Option("--sglang-version", help="SGLang version the draft is for")]


def doctor(
    draft: Annotated[Path, typer.Argument(help="drafter checkpoint folder")],
    target: TargetOpt = None,
    algorithm: Annotated[str, typer.Option(help="--speculative-algorithm you will serve it with")] = "EAGLE3",
    sglang_version: VersionOpt = "0.5.14",
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    serve: Annotated[
        bool, typer.Option("--serve", help="also start the engine with the draft (load smoke test)")
    ] = False,
    engine: Annotated[str, typer.Option(help="--serve: sglang, reference, or auto")] = "auto",
    depth: Annotated[int, typer.Option(help="--serve: chain depth k (k steps, topk 1)")] = 3,
    port: Annotated[int, typer.Option(help="--serve: server port (0: a free one)")] = 0,
    requests: Annotated[int, typer.Option(help="--serve: greedy smoke requests")] = 4,
    max_new_tokens: Annotated[int, typer.Option(help="--serve: tokens per request")] = 32,
    min_accept: Annotated[float, typer.Option(help="--serve: acceptance below this fails")] = 1.05,
    sglang_arg: Annotated[
        list[str] | None, typer.Option(help="--serve: one more SGLang flag token, e.g. --sglang-arg=--foo")
    ] = None,
    ready_timeout: Annotated[float, typer.Option(help="--serve: seconds to wait for readiness")] = 900,
) -> None:
    """Check a drafter against SGLang's loader: every finding with a code, an explanation and the fix.
    With --serve, then start the engine with it and send a few greedy requests (load smoke test).
    Exit 1 when there is an error."""
    from drafting.checkpoint import diagnose

    try:
        report = diagnose(draft, target=target, algorithm=algorithm, sglang_version=sglang_version)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    if not serve:
        typer.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.render_text())
        raise typer.Exit(0 if report.ok else 1)
    if target is None:
        typer.echo("error: --serve needs --target (the model folder the draft serves)", err=True)
        raise typer.Exit(EXIT_USAGE)
    from drafting.serving.evaluation.smoke_local import SmokeRequest, run_local_smoke

    smoke = run_local_smoke(
        SmokeRequest(
            draft=draft,
            target=target,
            algorithm="EAGLE" if algorithm == "NEXTN" else algorithm,
            engine=engine,
            depth=depth,
            port=port,
            requests=requests,
            max_new_tokens=max_new_tokens,
            min_accept=min_accept,
            extra_args=list(sglang_arg or []),
            ready_timeout_s=ready_timeout,
            echo_log=not as_json,
        )
    )
    ok = report.ok and smoke.ok
    if as_json:
        typer.echo(json.dumps({"ok": ok, "doctor": report.to_dict(), "smoke": smoke.as_dict()}, indent=2))
    else:
        typer.echo(report.render_text())
        typer.echo(
            f"load smoke test: {'PASSED' if smoke.ok else 'FAILED'} ({smoke.verdict}): {smoke.message}"
        )
        for line in smoke.log_lines if not smoke.ok else []:
            typer.echo(f"  | {line}")
    raise typer.Exit(0 if ok else 1)


def fix_keys(
    source: Annotated[Path, typer.Argument(help="drafter checkpoint to convert (never modified)")],
    dest: Annotated[Path, typer.Argument(help="new folder for the SGLang-ready checkpoint")],
    target: TargetOpt = None,
    sglang_version: VersionOpt = "0.5.14",
    force: Annotated[bool, typer.Option(help="replace an existing DEST (kept aside until done)")] = False,
    allow_pickle: Annotated[bool, typer.Option(help="read .bin pickles (weights_only)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Convert a speculators (`layers.0.*`) or EAGLE/SpecForge (`midlayer.*`) drafter to the layout every
    SGLang 0.5.x loads, then run the doctor on it. Exit 1, DEST untouched, when the result has an error."""
    from drafting.checkpoint import CheckpointError, fix_checkpoint

    try:
        report = fix_checkpoint(
            source, dest, target=target, sglang_version=sglang_version, force=force, allow_pickle=allow_pickle
        )
    except (CheckpointError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    typer.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.render_text())
    raise typer.Exit(0 if report.ok else 1)
