"""Import direction (DESIGN.md): stages import neither app nor Celery; app imports from workers only the
pure params contracts; routers hold no SQL."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_stages_import_neither_app_nor_celery() -> None:
    for path in python_files("workers/stages") + python_files("workers/params"):
        for module in imports_of(path):
            assert not module.startswith(("app", "celery", "kombu", "sqlalchemy")), f"{path}: {module}"


def test_app_imports_only_the_params_contract_from_workers() -> None:
    for path in python_files("app"):
        for module in imports_of(path):
            if module.startswith("workers"):
                assert module.startswith("workers.params"), f"{path}: {module}"


def test_params_modules_stay_light() -> None:
    heavy = ("torch", "transformers", "safetensors", "sglang", "workers.proc", "workers.stages")
    for path in python_files("workers/params"):
        for module in imports_of(path):
            assert not module.startswith(heavy), f"{path}: {module}"


def test_routers_hold_no_sql_and_services_never_commit() -> None:
    for path in python_files("app"):
        source = path.read_text()
        if path.name == "router.py":
            assert "select(" not in source, path
            assert ".execute(" not in source, path
        if path.name in ("service.py", "lifecycle.py", "router.py", "repository.py"):
            assert ".commit()" not in source, path


def test_os_environ_is_read_only_in_settings() -> None:
    allowed = {ROOT / "app/core/config.py"}
    for folder in ("app", "workers", "cli"):
        for path in python_files(folder):
            if path not in allowed:
                assert "os.environ" not in path.read_text(), path


def test_no_module_is_past_400_lines() -> None:
    for folder in ("app", "workers", "cli"):
        for path in python_files(folder):
            assert len(path.read_text().splitlines()) <= 420, path
