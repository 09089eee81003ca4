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
) -> None:
    """Check a drafter against SGLang's loader: every finding with a code, an explanation and the fix.
    Exit 1 when there is an error."""
    from workers.checkpoint import diagnose

    try:
        report = diagnose(draft, target=target, algorithm=algorithm, sglang_version=sglang_version)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    typer.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.render_text())
    raise typer.Exit(0 if report.ok else 1)


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
    from workers.checkpoint import CheckpointError, fix_checkpoint

    try:
        report = fix_checkpoint(
            source, dest, target=target, sglang_version=sglang_version, force=force, allow_pickle=allow_pickle
        )
    except (CheckpointError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    typer.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.render_text())
    raise typer.Exit(0 if report.ok else 1)
