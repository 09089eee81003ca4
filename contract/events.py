"""Stage events: what a stage process reports to its worker besides its log, as JSON lines on its event
pipe. `StageContext` (drafting/context.py) emits them; the worker's EventPump (workers/events.py) parses
each line with `parse_event` and records it. A line whose `type` is none of these (a stage's own report, e.g.
`benchmark_table`) is not an event the worker records; one of these types with bad fields is malformed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Event(BaseModel):
    # Permissive like the pipe it travels on: a torchrun rank tags its events with `rank`, a server event
    # carries whatever the server's record takes.
    model_config = ConfigDict(extra="allow")

    rank: int | None = None


class ProgressEvent(_Event):
    type: Literal["progress"] = "progress"
    fraction: float = 0.0
    message: str = ""


class MetricEvent(_Event):
    type: Literal["metric"] = "metric"
    name: str
    value: float
    step: int


class ArtifactEvent(_Event):
    type: Literal["artifact"] = "artifact"
    kind: str
    path: str
    meta: dict[str, Any] | None = None


class ServerEvent(_Event):
    """A launch's server changed: state (starting|ready|failed|stopping|stopped), url, argv, pid, engine…"""

    type: Literal["server"] = "server"
    state: str | None = None


class ResultEvent(_Event):
    type: Literal["result"] = "result"
    result: dict[str, Any] | None = None


class ErrorEvent(_Event):
    type: Literal["error"] = "error"
    reason: str | None = None
    message: str | None = None
    details: dict[str, Any] | None = None


StageEvent = Annotated[
    ProgressEvent | MetricEvent | ArtifactEvent | ServerEvent | ResultEvent | ErrorEvent,
    Field(discriminator="type"),
]
EVENT_TYPES = frozenset({"progress", "metric", "artifact", "server", "result", "error"})
_ADAPTER: TypeAdapter[StageEvent] = TypeAdapter(StageEvent)


def parse_event(raw: dict[str, Any]) -> StageEvent:
    """The typed event; raises pydantic.ValidationError (a ValueError) for a malformed one."""
    return _ADAPTER.validate_python(raw)


def to_line(event: BaseModel) -> dict[str, Any]:
    """An event as the JSON object a sink writes."""
    return event.model_dump(exclude_none=True)  # the sink writes it as JSON (anything else as str)
