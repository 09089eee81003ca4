"""The prompt set of an eval or benchmark stage, read as the stage's failures name it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contract.reasons import TerminationReason
from drafting.context import StageContext, StageError
from drafting.serving.prompts import prepare_prompts
from drafting.serving.prompts.chat_source import raw_text_note
from drafting.userfiles import UserFileError


def stage_prompts(
    ctx: StageContext, path: str | Path | None, limit: int, *, chat_template_from: str | Path | None = None
) -> tuple[list[Any], str | None]:
    """The prompt set (a path or a named set) of an eval or benchmark stage, chat records rendered with the
    chat template of the tokenizer in `chat_template_from`, and the warning (logged, and returned for the
    result) when raw-text prompts go to a target with a chat template (chat_source.raw_text_note). A path
    eyas will not read → BAD_INPUT, a set it cannot parse or render → DATA_MISMATCH, both naming the path."""
    try:
        prompts = list(prepare_prompts(path, limit=limit, tokenizer_folder=chat_template_from))
        note = raw_text_note(prompts, chat_template_from)
    except UserFileError as exc:  # a FIFO, a device, too large: the user's path
        raise StageError.bad_input(exc) from exc
    except (OSError, ValueError) as exc:
        raise StageError(
            f"cannot read the prompt set: {exc}", reason=TerminationReason.DATA_MISMATCH
        ) from exc
    if note is not None:
        ctx.log(f"warning: {note}")
    return prompts, note
