"""The dashboard's files over real HTTP: the page, its scripts, caching, security headers, nothing else."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from app.dashboard.router import CONTENT_SECURITY_POLICY, STATIC_DIR, load_static_files

JS_DIR = STATIC_DIR / "js"


def test_the_page_is_served_at_root_with_a_strict_policy(dashboard_url: str) -> None:
    response = httpx.get(f"{dashboard_url}/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self';" in CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert '<script src="/dashboard/js/main.js" type="module">' in response.text


def test_every_file_the_page_names_is_served_with_its_type(dashboard_url: str) -> None:
    page = httpx.get(f"{dashboard_url}/").text
    names = re.findall(r'(?:src|href)="(/dashboard/[^"]+)"', page)
    assert len(names) >= 5
    for name in names:
        response = httpx.get(f"{dashboard_url}{name}")
        assert response.status_code == 200, name
        expected = {"js": "text/javascript", "css": "text/css", "svg": "image/svg+xml"}[
            name.rsplit(".", 1)[1]
        ]
        assert response.headers["content-type"].startswith(expected), name


def test_large_files_are_gzipped_for_clients_that_ask(dashboard_url: str) -> None:
    largest = max((STATIC_DIR / "vendor").rglob("*.js"), key=lambda path: path.stat().st_size)
    url = f"{dashboard_url}/dashboard/{largest.relative_to(STATIC_DIR).as_posix()}"
    packed = httpx.get(url, headers={"Accept-Encoding": "gzip"})
    plain = httpx.get(url, headers={"Accept-Encoding": "identity"})
    assert packed.headers["content-encoding"] == "gzip"
    assert int(packed.headers["content-length"]) < largest.stat().st_size / 2
    assert "content-encoding" not in plain.headers
    assert packed.content == plain.content == largest.read_bytes()


def test_module_imports_all_resolve_to_served_files(dashboard_url: str) -> None:
    for path in sorted(JS_DIR.rglob("*.js")):
        for target in re.findall(r'from "(\.{1,2}/[^"]+)"', path.read_text()):
            url_path = (path.parent / target).resolve().relative_to(STATIC_DIR).as_posix()
            assert httpx.get(f"{dashboard_url}/dashboard/{url_path}").status_code == 200, (path, target)


def test_revalidation_answers_304_with_the_same_etag(dashboard_url: str) -> None:
    first = httpx.get(f"{dashboard_url}/dashboard/js/main.js")
    assert first.headers["cache-control"] == "no-cache"
    again = httpx.get(
        f"{dashboard_url}/dashboard/js/main.js", headers={"If-None-Match": first.headers["etag"]}
    )
    assert again.status_code == 304
    assert again.content == b""
    stale = httpx.get(f"{dashboard_url}/dashboard/js/main.js", headers={"If-None-Match": '"other"'})
    assert stale.status_code == 200


def test_only_known_files_are_served(dashboard_url: str) -> None:
    for name in ("nope.js", "../router.py", "..%2Frouter.py", "js/../../router.py", "%2e%2e/__init__.py"):
        response = httpx.get(f"{dashboard_url}/dashboard/{name}")
        assert response.status_code == 404, name
        assert b"import" not in response.content


def test_the_vendored_chart_library_ships_with_its_licence(dashboard_url: str) -> None:
    library = httpx.get(f"{dashboard_url}/dashboard/vendor/uplot/uPlot.iife.min.js")
    assert library.text.startswith("/*! https://github.com/leeoniya/uPlot (v1.6.32) */")
    licence = httpx.get(f"{dashboard_url}/dashboard/vendor/uplot/LICENSE")
    assert "MIT License" in licence.text
    assert licence.headers["content-type"] == "text/plain; charset=utf-8"


def test_loader_skips_unknown_file_types(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.js").write_text("export {};")
    (tmp_path / "notes.txt").write_text("not served")
    (tmp_path / "run.py").write_text("print()")
    files = load_static_files(tmp_path)
    assert list(files) == ["sub/a.js"]
    assert files["sub/a.js"].media_type == "text/javascript; charset=utf-8"


def test_no_script_writes_markup_from_strings() -> None:
    # Log lines, messages and params reach the page only as text nodes; one innerHTML would undo that.
    for path in sorted(JS_DIR.rglob("*.js")):
        source = path.read_text()
        for sink in (
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
        ):
            assert sink not in source, f"{path.name} uses {sink}"
