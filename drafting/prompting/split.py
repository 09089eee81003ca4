"""A categorised prompt set cut in two parts that share no record, for evaluation and held-out validation.

`max_prompts` takes a categorised set in category rotation (the first record of each category in order of
appearance, then the second of each, …: drafting.serving.prompts), so the first part here is exactly the
records an eval or a sweep with `max_prompts: first` asks, and the second the next `then` in the same
rotation, categories balanced as the first's are. MT-Bench cut so: 8 questions for eval and the sweep, the
next ones for the pipeline's `held_out` set, which picks the checkpoint and estimates acceptance without
touching what eval measures.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from drafting.userfiles import Cap, iter_user_lines

T = TypeVar("T")


def category_rotation(items: Sequence[T], category: Callable[[T], str | None]) -> list[T]:
    """All of `items`, the first of each category (in order of first appearance), then the second of each…"""
    queues: dict[str | None, list[T]] = {}
    for item in items:
        queues.setdefault(category(item), []).append(item)
    deepest = max((len(queue) for queue in queues.values()), default=0)
    return [queue[depth] for depth in range(deepest) for queue in queues.values() if depth < len(queue)]


def split_prompt_file(
    source: Path, first: int, then: int, first_path: Path, then_path: Path
) -> tuple[Path, Path]:
    """Write `source`'s first `first` records in category rotation to `first_path` and the next `then` to
    `then_path` (JSONL, records as they are). ValueError when the set has fewer than first + then records."""
    records: list[dict[str, Any]] = []
    for number, line in iter_user_lines(source, Cap.DATASET, what="prompt set"):
        if not line.strip():
            continue
        record = json.loads(line)
        if not isinstance(record, dict):
            raise ValueError(f"{source}:{number}: a record is a JSON object")
        records.append(record)
    rotation = category_rotation(records, _category)
    if first + then > len(rotation):
        raise ValueError(f"{source} holds {len(rotation)} records: cannot take {first} and then {then} more")
    first_path.write_text("".join(json.dumps(r) + "\n" for r in rotation[:first]))
    then_path.write_text("".join(json.dumps(r) + "\n" for r in rotation[first : first + then]))
    return first_path, then_path


def _category(record: dict[str, Any]) -> str | None:
    value = record.get("category")
    return value if isinstance(value, str) else None
