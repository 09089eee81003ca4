"""Params of the fix_keys and doctor stages (drafter checkpoints for SGLang)."""

from __future__ import annotations

import posixpath
from typing import Literal

from pydantic import Field, model_validator

from contract.params.common import HostPath, OutputPath, StageParams

# What an SGLang version may look like; drafting.sglang_facts.parse_version reads it with this pattern.
SGLANG_VERSION_PATTERN = r"^v?\d+\.\d+\.\d+(\.?(post|rc|dev)\d*)?$"
DEFAULT_SGLANG_VERSION = "0.5.14"


class FixKeysParams(StageParams):
    source: HostPath = Field(
        description="drafter folder (speculators layers.0.* or EAGLE/SpecForge midlayer.*)"
    )
    dest: OutputPath = Field(description="folder to write the SGLang-ready checkpoint to (must not exist)")
    target_config: HostPath | None = Field(
        None, description="target model folder or its config.json (vocab, rope, hidden size, context)"
    )
    sglang_version: str = Field(
        DEFAULT_SGLANG_VERSION, pattern=SGLANG_VERSION_PATTERN, description="SGLang release to check against"
    )
    force: bool = Field(
        False, description="replace an existing dest (kept aside until the new one is complete)"
    )
    allow_pickle: bool = Field(
        False, description="read pickle weights (.bin) with torch.load(weights_only=True); off by default"
    )

    @model_validator(mode="after")
    def _dest_apart_from_source(self) -> FixKeysParams:
        """dest is written (with force, replaced) as a whole: it may not be, hold or lie in the source."""
        source, dest = posixpath.normpath(self.source), posixpath.normpath(self.dest)
        if dest == source:
            raise ValueError(
                f"dest {self.dest} is the source folder; write the converted checkpoint elsewhere"
            )
        if _inside(dest, source):
            raise ValueError(f"dest {self.dest} lies inside the source folder {self.source}")
        if _inside(source, dest):
            raise ValueError(f"dest {self.dest} contains the source folder {self.source}")
        return self


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


class DoctorParams(StageParams):
    draft: HostPath = Field(description="drafter folder to check")
    target: HostPath | None = Field(None, description="target model folder or its config.json")
    algorithm: Literal["EAGLE3", "EAGLE", "NEXTN"] = Field(
        "EAGLE3", description="the --speculative-algorithm the server will run"
    )
    sglang_version: str = Field(
        DEFAULT_SGLANG_VERSION, pattern=SGLANG_VERSION_PATTERN, description="SGLang release to check against"
    )
