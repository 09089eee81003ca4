#!/usr/bin/env python3
"""An offline install bundle for a GPU host without network: eyas's own wheel and the wheels of what it needs
that the host does not have yet, for the host's Python version and platform, in one folder (a wheelhouse),
with optional sets for SGLang and the reference trainers.

Run it from the repository root on a machine that reaches the package index (with pip and packaging):

    python3 -m pip freeze > host.txt                                   # on the GPU host
    python3 scripts/wheelhouse.py OUT --host-freeze host.txt [--python-version 3.12]
        [--platform manylinux_2_28_x86_64 ...] [--with sglang] [--with speculators] [--with specforge]
    python3 -m pip install --no-index --no-deps OUT/*.whl              # on the GPU host

Every package the host's freeze names is left to the host, whatever its version there (torch, CUDA,
transformers are what a GPU host brings), and so is what only such packages need (torch's CUDA wheels): pip
resolves the rest of eyas's dependencies (pyproject.toml) and of each asked set for that Python and
platform (binary wheels only), and it is downloaded. The install takes the wheels as they are
(`--no-deps`): eyas then runs on the host's versions of what it already had, and OUT/wheelhouse.json lists
those outside the versions eyas asks for. Sets:

- `sglang`: SGLang at `--sglang-version` and what it needs beside the host's packages;
- `speculators`: speculators 0.9.0 and hs-connectors 0.9.0, for `python -m bench.speculators_side_by_side`;
- `specforge`: SpecForge 0.2.0 alone, for `python -m bench.specforge_side_by_side`: its pins (torch 2.11,
  transformers 5.8.1, sglang 0.5.14) would replace the host's, so none of them is resolved.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
SETS = {
    "speculators": ["speculators==0.9.0", "hs-connectors==0.9.0"],
    "specforge": [],  # taken alone: NO_DEPS
}
NO_DEPS = {"specforge": ["specforge==0.2.0"]}
FREEZE_LINE = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==\s*(?P<version>\S+)|@|$)")
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def canonical(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def host_packages(freeze: Path | None) -> dict[str, str]:
    """name -> version of `pip freeze` lines (`name==version`; other forms name the package alone)."""
    found: dict[str, str] = {}
    for line in freeze.read_text().splitlines() if freeze else ():
        pinned = FREEZE_LINE.match(line.strip())
        if pinned:
            found[canonical(pinned["name"])] = pinned["version"] or ""
    return found


def requirements(project: Path, sets: list[str], sglang_version: str) -> list[str]:
    """eyas's dependencies as pyproject.toml pins them, and each asked set's."""
    wanted = list(tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"])
    for name in sets:
        wanted += [f"sglang=={sglang_version}"] if name == "sglang" else SETS[name]
    return wanted


def outside_pins(wanted: list[str], host: dict[str, str]) -> dict[str, dict[str, str]]:
    """The host's packages whose version lies outside what a requirement of `wanted` asks for."""
    found = {}
    for text in wanted:
        requirement = Requirement(text)
        version = host.get(canonical(requirement.name))
        if (
            version
            and requirement.specifier
            and not requirement.specifier.contains(version, prereleases=True)
        ):
            found[canonical(requirement.name)] = {"host": version, "asked": str(requirement.specifier)}
    return found


def pip_target(args: argparse.Namespace) -> list[str]:
    """The options that make pip choose wheels for the host rather than for this machine."""
    options = ["--only-binary=:all:", "--implementation", "cp", "--python-version", args.python_version]
    for platform in [*args.platform, "any"]:
        options += ["--platform", platform]
    if args.index_dir is not None:
        options += ["--no-index", "--find-links", str(args.index_dir)]
    return options


def resolve(args: argparse.Namespace, wanted: list[str]) -> list[dict[str, Any]]:
    """What `wanted` installs on the host, as pip resolves it (a dry run): its report's `install` items."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        command = [*args.pip, "install", "--dry-run", "--ignore-installed", "--quiet", *pip_target(args)]
        command += ["--target", str(Path(scratch) / "site"), "--report", str(report), *wanted]
        subprocess.run(command, check=True)  # noqa: S603 - argv list, no shell
        installed: list[dict[str, Any]] = json.loads(report.read_text())["install"]
    return installed


def host_markers(python_version: str) -> dict[str, str]:
    """Environment markers of a CPython `python_version` on x86-64 Linux (what the platforms name)."""
    return {
        "python_version": python_version, "python_full_version": f"{python_version}.0", "os_name": "posix",
        "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
        "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": "",
    }  # fmt: skip


def needed(installed: list[dict[str, Any]], host: dict[str, str], python_version: str) -> dict[str, str]:
    """name -> version of the resolved packages the host needs: those asked for, and what they require in
    turn, walking no further into a package the host has (its own dependencies are the host's)."""
    items = {canonical(i["metadata"]["name"]): i for i in installed}
    markers = host_markers(python_version)
    extras: dict[str, set[str]] = {}
    waiting = []
    for name, item in items.items():
        if item.get("requested"):
            extras[name] = set(item.get("requested_extras") or ())
            waiting.append(name)
    reached: set[str] = set()
    while waiting:
        name = waiting.pop()
        if name in reached or name in host:
            continue
        reached.add(name)
        for text in items[name]["metadata"].get("requires_dist") or ():
            requirement = Requirement(text)
            wanted = canonical(requirement.name)
            applies = requirement.marker is None or any(
                requirement.marker.evaluate(markers | {"extra": extra}) for extra in {"", *extras[name]}
            )
            if applies and wanted in items:
                extras.setdefault(wanted, set()).update(requirement.extras)
                waiting.append(wanted)
    return {name: items[name]["metadata"]["version"] for name in sorted(reached)}


def download(args: argparse.Namespace, pins: list[str]) -> None:
    if pins:
        command = [*args.pip, "download", "--no-deps", "--quiet", *pip_target(args), "--dest", str(args.out)]
        subprocess.run([*command, *pins], check=True)  # noqa: S603 - argv list, no shell


def build(args: argparse.Namespace) -> dict[str, object]:
    args.out.mkdir(parents=True, exist_ok=True)
    host = host_packages(args.host_freeze)
    wanted = requirements(args.project, args.set, args.sglang_version)
    asked = [text for text in wanted if canonical(Requirement(text).name) not in host]
    installed = resolve(args, asked) if asked else []
    carried = needed(installed, host, args.python_version)
    alone = [pin for name in args.set for pin in NO_DEPS.get(name, [])]
    download(args, [f"{name}=={version}" for name, version in carried.items()] + alone)
    wheel = [*args.pip, "wheel", "--no-deps", "--no-build-isolation", "--quiet", "--wheel-dir", str(args.out)]
    subprocess.run([*wheel, str(args.project)], check=True)  # noqa: S603 - argv list, no shell
    reached = {canonical(Requirement(text).name) for text in wanted} | {
        canonical(i["metadata"]["name"]) for i in installed
    }
    record = {
        "python_version": args.python_version,
        "platforms": args.platform,
        "sets": args.set,
        "carried": carried | dict(pin.split("==") for pin in alone),
        "left_to_the_host": sorted(reached & set(host)),
        "needed_only_by_the_host": sorted(reached - set(carried) - set(host)),
        "host_outside_pins": outside_pins(wanted, host),
        "install": "python3 -m pip install --no-index --no-deps OUT/*.whl",
    }
    (args.out / "wheelhouse.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path, help="the wheelhouse folder")
    parser.add_argument("--host-freeze", type=Path, help="`pip freeze` on the host: what it has already")
    parser.add_argument("--python-version", default="3.12", help="the host's Python (major.minor)")
    parser.add_argument(
        "--platform",
        action="append",
        help=f"a wheel platform the host takes (repeatable; default {PLATFORMS})",
    )
    parser.add_argument("--with", dest="set", action="append", default=[], choices=["sglang", *SETS])
    parser.add_argument("--sglang-version", default="0.5.14", help="with --with sglang")
    parser.add_argument("--project", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--index-dir", type=Path, help="resolve from this folder of wheels, not the index")
    args = parser.parse_args(argv)
    args.platform = args.platform or PLATFORMS
    args.pip = [sys.executable, "-m", "pip"]
    return args


def main() -> None:
    try:
        record = build(parse())
    except subprocess.CalledProcessError as failed:  # pip has said why above
        raise SystemExit(f"wheelhouse: `pip {failed.cmd[3]}` failed (exit {failed.returncode})") from None
    print(json.dumps({k: record[k] for k in ("carried", "left_to_the_host", "host_outside_pins")}, indent=2))
    print(f"on the host: {record['install']}")


if __name__ == "__main__":
    main()
