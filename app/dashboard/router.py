"""The dashboard: one HTML page at `/` and its static files under `/dashboard/`.

The page holds no data and needs no token; its scripts call the API with the token the user typed (kept in
sessionStorage). Files are read once at import into memory (they are small: ~150 KB with the charting
library), so a request never touches the filesystem and no path from the URL is ever joined to a folder:
only names found at import can be served.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter, Request, Response, status

from app.core.errors import AppError, ErrorCode

STATIC_DIR = Path(__file__).resolve().parent / "static"
ASSET_PREFIX = "/dashboard/"

_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
_LICENSE_TYPE = "text/plain; charset=utf-8"

# Scripts and styles come only from this origin; the page is never framed. Charts set element styles
# through the CSSOM (allowed without 'unsafe-inline') and logs go in as text nodes: nothing inline is needed.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    media_type: str
    etag: str


def _media_type(path: Path) -> str | None:
    if path.name == "LICENSE":
        return _LICENSE_TYPE
    return _MEDIA_TYPES.get(path.suffix)


def load_static_files(root: Path = STATIC_DIR) -> dict[str, StaticFile]:
    """Every servable file under `root`, keyed by its posix path relative to it."""
    files: dict[str, StaticFile] = {}
    for path in sorted(root.rglob("*")):
        media_type = _media_type(path)
        if not path.is_file() or media_type is None:
            continue
        body = path.read_bytes()
        etag = f'"{hashlib.sha256(body).hexdigest()[:20]}"'
        files[path.relative_to(root).as_posix()] = StaticFile(body, media_type, etag)
    return files


STATIC_FILES = load_static_files()
router = APIRouter(include_in_schema=False)


def _serve(file: StaticFile, request: Request) -> Response:
    # no-cache = revalidate every time: an upgraded eyas serves its new scripts at once, and the ETag keeps
    # the revalidation to a 304 with no body.
    headers = {**SECURITY_HEADERS, "ETag": file.etag, "Cache-Control": "no-cache"}
    if request.headers.get("if-none-match") == file.etag:
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
    return Response(content=file.body, media_type=file.media_type, headers=headers)


@router.get("/")
def dashboard_page(request: Request) -> Response:
    """The single-page dashboard (jobs, pipelines, hosts, servers; routes live in the URL fragment)."""
    return _serve(STATIC_FILES["index.html"], request)


@router.get(ASSET_PREFIX + "{name:path}")
def dashboard_asset(name: str, request: Request) -> Response:
    """A script, style sheet, image or vendored library of the dashboard."""
    file = STATIC_FILES.get(name)
    if file is None:
        raise AppError(ErrorCode.NOT_FOUND, f"no dashboard file {name!r}")
    return _serve(file, request)
