"""bench.recipes' named sets and choices: every variant is a valid train step of the GPU recipe's pipeline
(a misspelt or conflicting key would cost a GPU host its recipes run: the train params forbid both), and
the variants a command line picks are the ones it names. The variants running:
tests/ml/test_train_held_out.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.recipes import RECIPE_SETS, chosen_variants, parse
from cli.demo.real import gpu_pipeline_spec
from contract.params.train import TrainParams


@pytest.mark.parametrize("recipe_set", sorted(RECIPE_SETS))
def test_every_variant_is_a_valid_train_step(recipe_set: str, tmp_path: Path) -> None:
    assets = {"target": str(tmp_path / "target"), "prompts": str(tmp_path / "q.jsonl")}
    recipe = gpu_pipeline_spec(assets, workdir=str(tmp_path / "runs"))["train"]
    base = {**recipe, "data": str(tmp_path), "target": str(tmp_path)}
    variants = RECIPE_SETS[recipe_set]
    assert variants
    for name, overrides in variants.items():
        params = TrainParams.model_validate({**base, **overrides, "output": str(tmp_path / name)})
        for key, value in overrides.items():
            assert getattr(params, key) == value


def test_a_command_line_picks_its_variants_and_refuses_a_name_the_set_lacks() -> None:
    head = ["x", "t", "o"]
    picked = chosen_variants(
        parse([*head, "--recipe-set", "data-size", "--only", "n1000", "--only", "n2000"])
    )
    assert picked == {"n1000": {"train_samples": 1000}, "n2000": {"train_samples": 2000}}
    assert chosen_variants(parse([*head, "--recipe-set", "specforge"])) == RECIPE_SETS["specforge"]
    mixed = chosen_variants(parse([*head, "--variant", 'fast={"lr": 0.01}', "--recipe-set", "speculators"]))
    assert list(mixed) == ["fast", *RECIPE_SETS["speculators"]]
    assert chosen_variants(parse(head)) == {"base": {}}
    with pytest.raises(SystemExit, match=r"--only \['n3000'\]: not in recipe set 'data-size'"):
        chosen_variants(parse([*head, "--recipe-set", "data-size", "--only", "n3000"]))
    with pytest.raises(SystemExit, match="--only picks from a --recipe-set"):
        chosen_variants(parse([*head, "--only", "n1000"]))
    with pytest.raises(SystemExit, match="--variant NAME="):
        chosen_variants(parse([*head, "--variant", "no-json"]))
