"""The house rules, read from the code's imports (AST), not grepped: who may import whom (DESIGN.md "Layout",
CONTRIBUTING.md), routers hold no SQL, services never commit, one Settings, no module past ~400 lines.

Each rule is a function from (importing module, imported module) to a reason or None, so a test can show
that a deliberately bad import is caught (test_a_bad_import_is_caught) — a rule that cannot fail is no rule.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "contract", "drafting", "workers", "cli")
# Beside the product: the benchmarks a user runs, and what they share with the tests.
SUPPORT = ("bench", "testsupport")
DOMAINS = (
    "jobs",
    "pipelines",
    "hosts",
    "logs",
    "servers",
    "benchmarks",
    "artifacts",
    "tokens",
    "launch",
    "metrics",
)
RUNTIME_FRAMEWORKS = ("celery", "kombu", "sqlalchemy", "alembic", "fastapi", "starlette", "uvicorn", "redis")
HEAVY = ("torch", "transformers", "safetensors", "sglang", "numpy", "speculators", "specforge")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, importer: str) -> Iterator[str]:
    """Absolute names of every module an import statement names (relative imports resolved)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = importer.split(".")[: -node.level]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module
            # `from app.jobs import repository` imports the module app.jobs.repository
            yield from (f"{module}.{alias.name}" for alias in node.names)


def _top(name: str) -> str:
    return name.split(".", 1)[0]


def _is(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def rule_contract_is_pure(importer: str, imported: str) -> str | None:
    if _is(importer, "contract") and _top(imported) in (*PACKAGES, *RUNTIME_FRAMEWORKS, *HEAVY):
        if not _is(imported, "contract"):
            return "contract imports pydantic and the standard library only"
    return None


def rule_library_stands_apart(importer: str, imported: str) -> str | None:
    if _is(importer, "drafting") and _is(imported, "app", "workers", "cli", *RUNTIME_FRAMEWORKS):
        return "the drafting library imports contract only (never app, workers, cli, Celery or SQLAlchemy)"
    return None


def rule_app_never_imports_the_runtime(importer: str, imported: str) -> str | None:
    if _is(importer, "app") and _is(imported, "workers", "drafting", "cli"):
        return "app imports contract, never workers, drafting or cli"
    return None


def rule_routers_are_thin(importer: str, imported: str) -> str | None:
    if not importer.endswith(".router") or not _is(importer, "app"):
        return None
    if imported.endswith(".repository") or ".repository." in imported:
        return "a router calls its service, never a repository"
    if imported.endswith(".router") and imported != importer:
        return "a router never imports another router (shared pieces live in core or a service)"
    if _is(imported, "sqlalchemy") and not _is(imported, "sqlalchemy.orm.Session"):
        if imported != "sqlalchemy.orm":  # `from sqlalchemy.orm import Session`: the dependency's type
            return "a router holds no SQL"
    return None


def rule_core_knows_no_domain(importer: str, imported: str) -> str | None:
    if _is(importer, "app.core") and any(_is(imported, f"app.{domain}") for domain in DOMAINS):
        return "app.core is below every domain package; it imports none"
    return None


def rule_runtime_reaches_app_through_services(importer: str, imported: str) -> str | None:
    if _is(importer, "workers") and _is(imported, "app"):
        if imported.endswith((".repository", ".router")) or ".repository." in imported:
            return "the runtime calls app services, never repositories or routers"
    return None


def rule_product_stands_alone(importer: str, imported: str) -> str | None:
    if _is(importer, *PACKAGES) and _is(imported, "bench", "testsupport", "tests"):
        return "the product never imports the benchmarks, the test support or the tests"
    return None


def rule_benchmarks_never_import_tests(importer: str, imported: str) -> str | None:
    if _is(importer, *SUPPORT) and _is(imported, "tests"):
        return "a benchmark (or the test support) imports the product and testsupport, never tests/"
    if _is(importer, "testsupport") and _is(imported, "bench"):
        return "the test support is below the benchmarks; it imports none"
    return None


RULES: tuple[Callable[[str, str], str | None], ...] = (
    rule_contract_is_pure,
    rule_library_stands_apart,
    rule_app_never_imports_the_runtime,
    rule_routers_are_thin,
    rule_core_knows_no_domain,
    rule_runtime_reaches_app_through_services,
    rule_product_stands_alone,
    rule_benchmarks_never_import_tests,
)


def violations(source: str, importer: str) -> list[str]:
    found = []
    for imported in imports_of(source, importer):
        for rule in RULES:
            reason = rule(importer, imported)
            if reason:
                found.append(f"{importer} imports {imported}: {reason}")
    return found


def python_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def test_every_import_keeps_the_house_rules() -> None:
    found = [
        line
        for path in python_files(*PACKAGES, *SUPPORT)
        for line in violations(path.read_text(), module_name(path))
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("importer", "source"),
    [
        ("drafting.stages.train", "from app.jobs import lifecycle"),
        ("drafting.serving.evaluation.smoke", "import celery"),
        ("drafting.ml.trainer", "from workers.runner import run_job"),
        ("contract.params.train", "import torch"),
        ("contract.params.train", "from drafting.ml import trainer"),
        ("app.jobs.service", "from workers.params import train"),
        ("app.jobs.router", "from app.jobs import repository"),
        ("app.jobs.router", "from app.jobs.repository import metrics"),
        ("app.servers.router", "from app.logs.router import page_logs"),
        ("app.core.deps", "from app.tokens import service"),
        ("workers.logship", "from app.logs import repository"),
        ("app.jobs.router", "from ..jobs import repository"),  # relative imports are resolved too
        ("bench.sweep_cpu", "from tests.serving.tiny import make_pair"),
        ("bench.load", "import tests.reliability._stack"),
        ("testsupport.tiny_pair", "from tests.ml.tiny import chat"),
        ("testsupport.random_llama", "from bench.extract import FULL"),
        ("drafting.stages.train", "from testsupport.tiny_pair import fit_drafter"),
        ("workers.runner", "import bench.journey"),
    ],
)
def test_a_bad_import_is_caught(importer: str, source: str) -> None:
    assert violations(source, importer)


def test_good_imports_pass() -> None:
    assert not violations(
        "from contract.params.train import TrainParams\nimport torch", "drafting.stages.train"
    )
    assert not violations("from app.jobs import service", "app.jobs.router")
    assert not violations("from app.jobs import service as jobs", "workers.runner")
    assert not violations("from pydantic import BaseModel", "contract.params.common")
    assert not violations("from testsupport.tiny_pair import make_pair\nimport torch", "bench.sweep_cpu")
    assert not violations("from app.core.config import Settings", "bench._harness")
    assert not violations("from cli.demo.constructed import chat", "testsupport.random_llama")


def test_benchmarks_run_as_modules_without_editing_the_import_path() -> None:
    """`python -m bench.NAME` from the repository root imports the product as installed or checked out: a
    benchmark that edits sys.path would import whatever that path finds."""
    edits = [p for p in python_files(*SUPPORT) if "sys.path" in p.read_text()]
    assert not edits, edits


def test_services_never_commit() -> None:
    for path in python_files("app"):
        if path.name in ("service.py", "lifecycle.py", "router.py", "repository.py"):
            assert ".commit()" not in path.read_text(), path


def test_os_environ_is_read_only_in_settings() -> None:
    allowed = {ROOT / "app/core/config.py"}
    for path in python_files(*PACKAGES):
        if path not in allowed:
            assert "os.environ" not in path.read_text(), path


def test_no_module_is_past_400_lines() -> None:
    for path in python_files(*PACKAGES, *SUPPORT):
        assert len(path.read_text().splitlines()) <= 420, path
