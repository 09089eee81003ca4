"""The one exception this package raises for inputs it cannot use."""

from __future__ import annotations

from pathlib import Path


class CheckpointError(Exception):
    """A checkpoint, config or destination eyas cannot use; the message names the file and why."""

    def __init__(self, message: str, *, path: Path | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


class DestinationNotOurs(CheckpointError):
    """The destination exists and eyas did not make it (no output marker), or it is not a folder: eyas
    does not replace it, with force or without."""


class PickleWeightsError(CheckpointError):
    """The weights are pickle files, which are read only with an explicit allow_pickle."""
