"""The recorded release tables, and the table that answers for a given SGLang release.

A table (`releases/sglang-X.Y.Z.json`) holds what `scan.scan_release` derives from that release's model
sources (every EntryClass architecture, its module, the class defining its capture hook, a digest of the
files) and what a person read in them: the capture rule of each hook class, with the modules read to get it
and their digests. Where sglang is installed and the release asked about is the installed one, its own
files answer (through the table when their digest matches it, else through a fresh scan); for any other
release the recorded table of that release answers, or the nearest earlier one (said so).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drafting.sglang_facts import Version, format_version, parse_version
from drafting.support_matrix.scan import ReleaseScan, installed_models_dir, scan_release

TABLES_DIR = Path(__file__).with_name("releases")


@dataclass(frozen=True)
class ReleaseTable:
    release: str
    source: str
    files_digest: str
    architectures: dict[str, dict[str, Any]]  # arch -> {"module": str, "hook": str | None}
    module_digests: dict[str, str]
    rules: dict[str, dict[str, Any]]  # hook class -> the rule read in its sources

    def dumps(self) -> str:
        """The table as JSON, one architecture, digest or rule a line (reviewable diffs)."""
        heads = {"release": self.release, "source": self.source, "files_digest": self.files_digest}
        parts = [f" {json.dumps(key)}: {json.dumps(value)}" for key, value in heads.items()]
        for key, mapping in (
            ("architectures", self.architectures),
            ("module_digests", self.module_digests),
            ("rules", self.rules),
        ):
            rows = ",\n".join(
                f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(mapping.items())
            )
            parts.append(f" {json.dumps(key)}: {{\n{rows}\n }}")
        return "{\n" + ",\n".join(parts) + "\n}\n"


@dataclass(frozen=True)
class AnsweringTable:
    """The table that answers for `asked`, and in words where it came from."""

    asked: str
    table: ReleaseTable
    origin: str
    exact: bool  # False: the asked release was not read; an earlier one answers


def files_digest(models_dir: Path) -> str:
    """Digest of every model module's bytes: equal digests, equal derivation."""
    digest = hashlib.sha256()
    for path in sorted(models_dir.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def load_table(path: Path) -> ReleaseTable:
    data = json.loads(path.read_text())
    return ReleaseTable(
        release=str(data["release"]),
        source=str(data["source"]),
        files_digest=str(data["files_digest"]),
        architectures=dict(data["architectures"]),
        module_digests=dict(data["module_digests"]),
        rules=dict(data["rules"]),
    )


@functools.cache
def recorded_tables() -> dict[Version, ReleaseTable]:
    tables = (load_table(path) for path in sorted(TABLES_DIR.glob("sglang-*.json")))
    return {parse_version(table.release): table for table in tables}


def installed_release() -> str | None:
    """The installed sglang's version, from its metadata (nothing imported)."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def table_for(release: str) -> AnsweringTable:
    """The installed release's own files when it is the one asked about, else the recorded tables."""
    asked = parse_version(release)
    installed = installed_release()
    if installed is not None and _same_release(installed, asked):
        from_files = _installed_table(installed)
        if from_files is not None:
            return from_files
    tables = recorded_tables()
    if asked in tables:
        table = tables[asked]
        return AnsweringTable(table.release, table, f"SGLang {table.release}'s recorded table", True)
    earlier = [version for version in tables if version <= asked]
    chosen = max(earlier) if earlier else min(tables)
    table = tables[chosen]
    origin = (
        f"SGLang {table.release}'s recorded table (SGLang {format_version(asked)}'s model classes "
        "were not read; the nearest release read answers)"
    )
    return AnsweringTable(format_version(asked), table, origin, False)


def _same_release(installed: str, asked: Version) -> bool:
    try:
        return parse_version(installed) == asked
    except ValueError:
        return False


@functools.cache
def _installed_table(installed: str) -> AnsweringTable | None:
    models_dir = installed_models_dir()
    if models_dir is None:
        return None
    recorded = recorded_tables().get(parse_version(installed))
    digest = files_digest(models_dir)
    if recorded is not None and recorded.files_digest == digest:
        origin = f"the installed SGLang {installed} (its model files match the recorded table)"
        return AnsweringTable(installed, recorded, origin, True)
    scanned = scan_release(models_dir)
    base = recorded or _nearest_recorded(parse_version(installed))
    table = derive_table(scanned, release=installed, source=str(models_dir), digest=digest, rules_from=base)
    origin = f"the installed SGLang {installed}'s model classes (read from {models_dir})"
    return AnsweringTable(installed, table, origin, True)


def _nearest_recorded(version: Version) -> ReleaseTable | None:
    tables = recorded_tables()
    earlier = [v for v in tables if v <= version]
    return tables[max(earlier)] if earlier else None


def derive_table(
    scanned: ReleaseScan, *, release: str, source: str, digest: str, rules_from: ReleaseTable | None
) -> ReleaseTable:
    """A table from a scan, keeping each rule of `rules_from` whose read modules are unchanged."""
    rules: dict[str, dict[str, Any]] = {}
    for hook in sorted({h for h in scanned.hooks.values() if h is not None}):
        kept = (rules_from.rules.get(hook) if rules_from else None) or {}
        read = list(kept.get("read") or [])
        unchanged = bool(read) and all(
            rules_from is not None and rules_from.module_digests.get(m) == scanned.module_digests.get(m)
            for m in read
        )
        rules[hook] = dict(kept) if unchanged else {"unread": True, "read": []}
    read_modules = sorted({m for rule in rules.values() for m in rule.get("read", [])})
    return ReleaseTable(
        release=release,
        source=source,
        files_digest=digest,
        architectures={
            arch: {"module": scanned.modules[arch], "hook": scanned.hooks[arch]} for arch in scanned.hooks
        },
        module_digests={m: scanned.module_digests[m] for m in read_modules if m in scanned.module_digests},
        rules=rules,
    )
