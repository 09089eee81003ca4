"""The stage registry names each params model by its dotted path, imported on first use: a stage process
(or a spare waiting for its job) loads its own kind's params only."""

from __future__ import annotations

import json
import subprocess
import sys

from contract.params.common import StageParams
from contract.stages import STAGES
from tests.conftest import ROOT


def test_every_stage_names_a_params_model_and_a_module() -> None:
    assert len(STAGES) == len({spec.params_name for spec in STAGES.values()})  # one entry per stage
    for kind, spec in STAGES.items():
        assert spec.kind == kind
        assert issubclass(spec.params, StageParams), kind
        assert spec.params.__module__ + "." + spec.params.__name__ == spec.params_name
        assert spec.module.startswith("drafting.stages."), kind


_LIST_PARAMS = (
    "import json, sys\nprint(json.dumps([m for m in sys.modules if m.startswith('contract.params.')]))"
)


def _params_modules_after(code: str) -> list[str]:
    """The contract.params modules a fresh interpreter holds after running `code`."""
    out = subprocess.run(
        [sys.executable, "-c", code + "\n" + _LIST_PARAMS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    loaded: list[str] = json.loads(out.splitlines()[-1])
    return loaded


def test_the_stage_process_imports_no_stages_params_before_its_job() -> None:
    shared = {"contract.params.common", "contract.params.text"}
    assert set(_params_modules_after("import workers.stage_main")) <= shared
    after_parse = _params_modules_after(
        "from contract.stages import STAGES\nSTAGES['selftest'].parse({'lines': 1})"
    )
    assert set(after_parse) <= shared | {"contract.params.selftest"}
