"""A target eyas cannot load, as a clear stage failure (for the stages that load targets)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from contract.reasons import TerminationReason
from drafting.context import StageError
from drafting.ml.text_model import RemoteCodeRefused, TargetModelError


@contextmanager
def target_errors() -> Iterator[None]:
    """A target that needs its own code where running it is not allowed fails REMOTE_CODE_NOT_ALLOWED; one
    whose text model eyas cannot find, build or fill fails DATA_MISMATCH; both with the loader's message."""
    try:
        yield
    except RemoteCodeRefused as exc:
        raise StageError(str(exc), reason=TerminationReason.REMOTE_CODE_NOT_ALLOWED) from None
    except TargetModelError as exc:
        raise StageError(str(exc), reason=TerminationReason.DATA_MISMATCH) from None
