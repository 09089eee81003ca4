"""One way every listing pages: newest first by (time, id), an opaque cursor naming the last row of a page,
answered as `{items, next_cursor}` (next_cursor null on the last page).

Keyset, not offset: rows added while a client pages never shift or repeat what it has already read.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any, TypeVar

from fastapi import Query
from sqlalchemy import Select, and_, or_
from sqlalchemy.orm import InstrumentedAttribute

from app.core.errors import AppError, ErrorCode

CURSOR_MAX_CHARS = 512
PageCursor = Annotated[
    str | None, Query(max_length=CURSOR_MAX_CHARS, description="the previous page's next_cursor")
]
After = tuple[datetime, uuid.UUID]
R = TypeVar("R")
S = TypeVar("S", bound=Select[Any])


def encode_cursor(at: datetime, row_id: uuid.UUID) -> str:
    raw = json.dumps([at.isoformat(), str(row_id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> After | None:
    """The (time, id) a cursor names; None for no cursor; 422 for one this API did not hand out."""
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at, row_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        return datetime.fromisoformat(at), uuid.UUID(row_id)
    except (ValueError, TypeError, json.JSONDecodeError):
        raise AppError(ErrorCode.VALIDATION_FAILED, "cursor is not one this API returned") from None


def newest_first(
    query: S,
    at: InstrumentedAttribute[datetime],
    row_id: InstrumentedAttribute[uuid.UUID],
    *,
    after: After | None,
    limit: int,
) -> S:
    """The query ordered newest first, past the row `after` names, with `limit` rows at most."""
    if after is not None:
        last_at, last_id = after
        query = query.where(or_(at < last_at, and_(at == last_at, row_id < last_id)))
    return query.order_by(at.desc(), row_id.desc()).limit(limit)


def page_of(
    rows: Sequence[R], limit: int, key: Callable[[R], tuple[datetime, uuid.UUID]]
) -> tuple[list[R], str | None]:
    """The first `limit` rows and the cursor of the next page (rows holds one more when there is one)."""
    shown = list(rows[:limit])
    if len(rows) <= limit or not shown:
        return shown, None
    return shown, encode_cursor(*key(shown[-1]))
