"""scripts/wheelhouse.py, the offline install bundle, run for real with pip against a folder of wheels
(no index is reached): what the host already has is left out whatever its version, and so is what only
the host's packages need; what the project and its extras need for the host's Python and platform is
downloaded; a no-deps set comes alone; the project's own wheel is built beside them; and wheelhouse.json
names the host's versions outside the project's pins."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "wheelhouse.py"


def wheel(folder: Path, name: str, version: str, *requires: str) -> None:
    """A pure-Python wheel holding only its metadata: enough for pip to resolve and download it."""
    stem = f"{name.replace('-', '_')}-{version}"
    extras = sorted({r.split('extra == "')[1].split('"')[0] for r in requires if "extra ==" in r})
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Provides-Extra: {e}" for e in extras] + [f"Requires-Dist: {r}" for r in requires]
    tags = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    with zipfile.ZipFile(folder / f"{stem}-py3-none-any.whl", "w") as archive:
        archive.writestr(f"{stem}.dist-info/METADATA", "\n".join(metadata) + "\n")
        archive.writestr(f"{stem}.dist-info/WHEEL", tags)
        archive.writestr(f"{stem}.dist-info/RECORD", "")


def test_the_wheelhouse_carries_what_the_host_lacks_and_a_no_deps_set_alone(tmp_path: Path) -> None:
    index = tmp_path / "index"
    index.mkdir()
    wheel(index, "alpha", "1.0", "beta>=0.5", 'speedup; extra == "fast"', 'legacy; python_version < "3.0"')
    wheel(index, "beta", "1.0", "cuda-runtime==9.0")  # the host has beta, so it has what beta needs
    wheel(index, "cuda-runtime", "9.0")
    wheel(index, "speedup", "2.0")
    wheel(index, "legacy", "1.0")
    wheel(index, "delta", "1.0")
    wheel(index, "specforge", "0.2.0", "torch==2.11.0")  # its pin is in no folder: it must not be resolved
    project = tmp_path / "project"
    (project / "tool").mkdir(parents=True)
    (project / "tool" / "__init__.py").write_text("")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tool"\nversion = "0.1.0"\ndependencies = ["alpha[fast]==1.0", "delta==1.0"]\n'
    )
    freeze = tmp_path / "host.txt"
    freeze.write_text("beta==0.9\ndelta==1.0\nsglang @ file:///wheels/sglang.whl\n")
    out = tmp_path / "out"
    command = [sys.executable, str(SCRIPT), str(out), "--host-freeze", str(freeze), "--index-dir", str(index)]
    command += ["--project", str(project), "--with", "specforge", "--python-version", "3.12"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    carried = sorted(p.name for p in out.glob("*.whl"))
    assert carried == [
        "alpha-1.0-py3-none-any.whl",
        "specforge-0.2.0-py3-none-any.whl",
        "speedup-2.0-py3-none-any.whl",
        "tool-0.1.0-py3-none-any.whl",
    ]
    record = json.loads((out / "wheelhouse.json").read_text())
    assert record["carried"] == {"alpha": "1.0", "speedup": "2.0", "specforge": "0.2.0"}
    assert record["left_to_the_host"] == ["beta", "delta"]
    assert record["needed_only_by_the_host"] == ["cuda-runtime"]
    assert record["host_outside_pins"] == {}  # delta==1.0 asked, 1.0 there; beta is alpha's, not asked
    freeze.write_text("delta==0.5\n")  # a host version outside the project's pin is named, not replaced
    rerun = [*command[:2], str(tmp_path / "again"), *command[3:]]
    again = subprocess.run(rerun, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    outside = json.loads((tmp_path / "again" / "wheelhouse.json").read_text())["host_outside_pins"]
    assert outside == {"delta": {"host": "0.5", "asked": "==1.0"}}
    assert record["install"] in done.stdout


def test_a_requirement_no_wheel_satisfies_fails_and_names_it(tmp_path: Path) -> None:
    index = tmp_path / "index"
    index.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "tool"\nversion = "0.1.0"\ndependencies = ["omega==3.0"]\n'
    )
    command = [sys.executable, str(SCRIPT), str(tmp_path / "out"), "--index-dir", str(index)]
    done = subprocess.run(
        [*command, "--project", str(project)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 1
    assert "omega==3.0" in done.stderr  # pip's own message
    assert "wheelhouse: `pip install` failed" in done.stderr
    assert "Traceback" not in done.stderr
    assert not list((tmp_path / "out").glob("*.whl"))
