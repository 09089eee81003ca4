"""The ceiling for status reads: a bare FastAPI endpoint returning constant JSON, served like eyas's API."""

from __future__ import annotations

from fastapi import FastAPI

app = FastAPI()
BODY = {"id": "00000000-0000-0000-0000-000000000000", "state": "running", "kind": "selftest", "progress": 0.5}


@app.get("/job")
def job() -> dict[str, object]:
    return BODY
