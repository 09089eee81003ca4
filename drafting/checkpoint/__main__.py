"""`python -m drafting.checkpoint {doctor,fix} ...`: both without the eyas CLI (bench, debugging)."""

from __future__ import annotations

import argparse
import json
import resource
import sys
from pathlib import Path

from drafting.checkpoint import CheckpointError, diagnose, fix_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m drafting.checkpoint")
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor")
    doctor.add_argument("draft", type=Path)
    fix = sub.add_parser("fix")
    fix.add_argument("source", type=Path)
    fix.add_argument("dest", type=Path)
    fix.add_argument("--force", action="store_true")
    fix.add_argument("--allow-pickle", action="store_true")
    for command in (doctor, fix):
        command.add_argument("--target", type=Path)
        command.add_argument("--sglang-version", default="0.5.14")
        command.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "doctor":
            report = diagnose(args.draft, target=args.target, sglang_version=args.sglang_version)
        else:
            report = fix_checkpoint(  # type: ignore[assignment]
                args.source,
                args.dest,
                target=args.target,
                sglang_version=args.sglang_version,
                force=args.force,
                allow_pickle=args.allow_pickle,
            )
    except CheckpointError as exc:
        sys.stderr.write(f"error: {exc.message}\n")
        return 2
    if args.json:
        out = report.to_dict()
        out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(report.render_text() + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
