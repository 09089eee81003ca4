"""Keep the recorded release tables true to SGLang's sources.

    python -m drafting.support_matrix record MODELS_DIR --release 0.5.14 --source "sglang-0.5.14 wheel"
    python -m drafting.support_matrix record MODELS_DIR --release 0.5.14 --reread
    python -m drafting.support_matrix check MODELS_DIR --release 0.5.14
    python -m drafting.support_matrix docs > docs/support-matrix.md

MODELS_DIR is a release's `sglang/srt/models` (the installed one, or a wheel unzipped:
`pip download --no-deps sglang==X -d D && unzip D/*.whl 'sglang/srt/models/*'`). `record` keeps a rule only
while the modules read for it are unchanged and marks the others unread; after reading the sources again and
editing the rules in the JSON, `record --reread` takes the new digests. `check` exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from drafting.sglang_facts import parse_version
from drafting.support_matrix.releases import (
    TABLES_DIR,
    ReleaseTable,
    derive_table,
    files_digest,
    load_table,
    recorded_tables,
)
from drafting.support_matrix.scan import scan_release


def table_path(release: str) -> Path:
    return TABLES_DIR / f"sglang-{release}.json"


def derive(models_dir: Path, release: str, source: str | None, *, reread: bool) -> ReleaseTable:
    path = table_path(release)
    existing = load_table(path) if path.exists() else None
    earlier = [t for v, t in recorded_tables().items() if v < parse_version(release)]
    base = existing or (earlier[-1] if earlier else None)
    scanned = scan_release(models_dir)
    if reread and base is not None:
        # the person vouches for every rule as written: take today's digests of the modules read
        base = ReleaseTable(**{**base.__dict__, "module_digests": scanned.module_digests})
    return derive_table(
        scanned,
        release=release,
        source=source or (existing.source if existing else str(models_dir)),
        digest=files_digest(models_dir),
        rules_from=base,
    )


def differences(recorded: ReleaseTable, derived: ReleaseTable) -> list[str]:
    found = []
    for arch in sorted(set(recorded.architectures) | set(derived.architectures)):
        was, now = recorded.architectures.get(arch), derived.architectures.get(arch)
        if was != now:
            found.append(f"{arch}: recorded {was}, derived {now}")
    for hook, rule in derived.rules.items():
        if rule.get("unread"):
            found.append(f"{hook}: capture rule not read (new hook class, or a module read for it changed)")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m drafting.support_matrix")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("record", "check"):
        command = commands.add_parser(name)
        command.add_argument("models_dir", type=Path)
        command.add_argument("--release", required=True)
        if name == "record":
            command.add_argument("--source")
            command.add_argument("--reread", action="store_true")
    commands.add_parser("docs")
    args = parser.parse_args(argv)
    if args.command == "docs":
        from drafting.support_matrix.docs import render_docs

        sys.stdout.write(render_docs())
        return 0
    derived = derive(
        args.models_dir,
        args.release,
        getattr(args, "source", None),
        reread=args.reread if args.command == "record" else False,
    )
    if args.command == "record":
        table_path(args.release).write_text(derived.dumps())
        print(f"wrote {table_path(args.release)}")  # noqa: T201 - a command-line tool's output
        return 0
    recorded = load_table(table_path(args.release))
    found = differences(recorded, derived)
    for line in found:
        print(line)  # noqa: T201 - a command-line tool's output
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
