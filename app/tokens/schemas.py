"""Bodies of the tokens API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict

from app.core.security import Scope


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON's types as written

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._@-]*$")
    scopes: list[Annotated[Scope, Strict(False)]] = Field(min_length=1, max_length=3)  # named in JSON


class TokenRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    name: str
    prefix: str
    scopes: list[str]
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


class TokenCreated(TokenRead):
    token: str = Field(description="the secret; shown only once")
