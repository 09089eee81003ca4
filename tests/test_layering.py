"""The house rules, read from the code's imports (AST), not grepped: who may import whom (DESIGN.md "Layout",
CONTRIBUTING.md), no import cycle between packages, routers hold no SQL, services never commit, one Settings,
no module past ~400 lines.

Each rule is a function from (importing module, imported module) to a reason or None, so a test can show
that a deliberately bad import is caught (test_a_bad_import_is_caught) — a rule that cannot fail is no rule.
The cycle rule reads the whole import graph (package_cycles); a planted cycle shows it can fail too.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "contract", "drafting", "workers", "cli")
# Beside the product: the benchmarks a user runs, and what they share with the tests.
SUPPORT = ("bench", "testsupport")
DOMAINS = (
    "maintenance",
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


def imports_of(source: str, importer: str, *, package: bool = False) -> Iterator[str]:
    """Absolute names of every module an import statement names (relative imports resolved; `package`: the
    importer is a package's __init__, where `.` is the package itself)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = importer.split(".")
                base = parts[: len(parts) - node.level + 1] if package else parts[: -node.level]
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


def rule_domains_meet_through_services(importer: str, imported: str) -> str | None:
    if not _is(importer, "app") or not (imported.endswith(".repository") or ".repository." in imported):
        return None
    owner = ".".join(imported.split(".")[:2])
    if _is(imported, "app") and not _is(importer, owner):
        return "a domain calls another domain's service, never its repository"
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
    rule_domains_meet_through_services,
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


Edges = Mapping[str, Mapping[str, str]]  # importer's node → imported node → one import that makes the edge


def import_graph(*folders: str) -> tuple[dict[str, set[str]], set[str]]:
    """Every module under `folders` → the modules among them it imports; and which of them are packages."""
    paths = {module_name(path): path for path in python_files(*folders)}
    packages = {name for name, path in paths.items() if path.name == "__init__.py"}
    graph = {}
    for name, path in paths.items():
        named = imports_of(path.read_text(), name, package=name in packages)
        graph[name] = {module for module in (_landing(n, paths) for n in named) if module not in (None, name)}
    return graph, packages


def _landing(name: str, modules: Mapping[str, object]) -> str | None:
    """The module an imported name lands in: `app.jobs.service.get_job` is app.jobs.service."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def package_cycles(graph: Mapping[str, set[str]], packages: set[str]) -> list[str]:
    """Import cycles between packages, at every level of the package tree. Within a package P, a module counts
    for the subpackage of P that holds it (at any depth), or for P itself when it lies directly in P; the
    top-level packages are the root's. So app.jobs ↔ app.logs, drafting.ml ↔ drafting.serving (through
    drafting.serving.prompts too), drafting.serving ↔ its own drafting.serving.prompts and drafting ↔ workers
    are each a cycle; a circle of one package's modules is module_cycles' to find."""
    found = []
    for parent in sorted({""} | packages):
        edges: dict[str, dict[str, str]] = {}
        for importer, imported_modules in graph.items():
            source = _room(importer, parent, packages)
            for imported in sorted(imported_modules, key=lambda name: (-name.count("."), name)):  # deepest
                target = _room(imported, parent, packages)
                if source is not None and target is not None and source != target:
                    edges.setdefault(source, {}).setdefault(target, f"{importer} imports {imported}")
        found += [_describe(cycle, tangle, edges) for cycle, tangle in _cycles(edges)]
    return found


def module_cycles(graph: Mapping[str, set[str]]) -> list[str]:
    edges = {
        module: {other: f"{module} imports {other}" for other in imported}
        for module, imported in graph.items()
    }
    return [_describe(cycle, tangle, edges) for cycle, tangle in _cycles(edges)]


def _room(module: str, parent: str, packages: set[str]) -> str | None:
    """The subpackage of `parent` that holds `module`, `parent` itself for a module lying directly in it, None
    for a module outside it."""
    if parent and not _is(module, parent):
        return None
    child = module if not parent else module[len(parent) + 1 :]
    child = ".".join(filter(None, (parent, child.split(".")[0])))
    return child if child in packages else parent


def _cycles(edges: Edges) -> list[tuple[list[str], set[str]]]:
    """Each set of two or more nodes that all reach each other (a tangle), with one cycle through it."""
    reach = {node: _reachable(edges, node) for node in edges}
    seen: set[str] = set()
    cycles = []
    for node in sorted(edges):
        if node not in seen and node in reach[node]:
            tangle = {other for other in reach[node] if node in reach.get(other, set())}
            seen |= tangle
            cycles.append((_path_back(edges, node, tangle), tangle))
    return cycles


def _reachable(edges: Edges, start: str) -> set[str]:
    found: set[str] = set()
    frontier = [start]
    while frontier:
        for following in edges.get(frontier.pop(), {}):
            if following not in found:
                found.add(following)
                frontier.append(following)
    return found


def _path_back(edges: Edges, start: str, tangle: set[str]) -> list[str]:
    """The shortest path from `start` back to it within `tangle` (breadth first)."""
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for following in sorted(edges.get(node, {})):
            if following == start:
                return [*paths[node], start]
            if following in tangle and following not in paths:
                paths[following] = [*paths[node], following]
                queue.append(following)
    raise AssertionError(f"{start} is in a cycle yet no path leads back to it")


def _describe(cycle: list[str], tangle: set[str], edges: Edges) -> str:
    steps = "; ".join(edges[a][b] for a, b in itertools.pairwise(cycle))
    others = sorted(tangle - set(cycle))
    also = f"; tangled with it: {', '.join(others)}" if others else ""
    return f"import cycle {' → '.join(cycle)} ({steps}){also}"


def test_every_import_keeps_the_house_rules() -> None:
    found = [
        line
        for path in python_files(*PACKAGES, *SUPPORT)
        for line in violations(path.read_text(), module_name(path))
    ]
    assert not found, "\n".join(found)


def test_no_import_cycle_between_packages() -> None:
    found = package_cycles(*import_graph(*PACKAGES))
    assert not found, "\n".join(found)


# drafting is held to the package rule only: some of its modules import each other (the drafter and its
# checkpoint helper for their types, the reference engine and its HTTP front).
@pytest.mark.parametrize("room", ["app", "contract", "workers", "cli"])
def test_no_import_cycle_between_modules(room: str) -> None:
    found = module_cycles(import_graph(room)[0])
    assert not found, "\n".join(found)


PLANTED_PACKAGES = {
    "app",
    "app.jobs",
    "app.logs",
    "drafting",
    "drafting.ml",
    "drafting.serving",
    "drafting.serving.prompts",
    "workers",
}


@pytest.mark.parametrize(
    ("graph", "tangled"),
    [
        (  # two domains calling each other
            {"app.jobs.maintenance": {"app.logs.repository"}, "app.logs.service": {"app.jobs.service"}},
            ("app.jobs", "app.logs"),
        ),
        (  # a subpackage deeper down counts for the sibling that holds it
            {
                "drafting.ml.trainer": {"drafting.serving.prompts.chat"},
                "drafting.serving.smoke": {"drafting.ml.x"},
            },
            ("drafting.ml", "drafting.serving"),
        ),
        (  # a package and its own subpackage
            {
                "drafting.serving.smoke": {"drafting.serving.prompts.chat"},
                "drafting.serving.prompts.chat": {"drafting.serving.render"},
            },
            ("drafting.serving", "drafting.serving.prompts"),
        ),
        (  # top-level rooms
            {"drafting.proc": {"workers.runner"}, "workers.runner": {"drafting.proc"}},
            ("drafting", "workers"),
        ),
        (  # three packages around
            {"app.jobs.a": {"app.logs.b"}, "app.logs.b": {"workers.c"}, "workers.c": {"app.jobs.a"}},
            ("app", "workers"),
        ),
    ],
)
def test_a_planted_package_cycle_is_caught(graph: dict[str, set[str]], tangled: tuple[str, ...]) -> None:
    found = package_cycles(graph, PLANTED_PACKAGES)
    assert len(found) == 1, found
    assert all(name in found[0] for name in tangled), found


def test_a_cycle_planted_in_the_real_code_is_caught() -> None:
    """pipelines' service calls jobs' service; jobs calling back into pipelines closes a circle."""
    graph, packages = import_graph(*PACKAGES)
    graph["app.jobs.states"].add("app.pipelines.service")
    found = [line for line in package_cycles(graph, packages) if "app.jobs.states imports" in line]
    assert len(found) == 1, found
    assert "app.pipelines" in found[0], found
    graph["app.jobs.service"].add("app.jobs.waiting")  # waiting imports the service
    assert any("app.jobs.service" in line for line in module_cycles(graph))


def test_imports_one_way_are_no_cycle() -> None:
    graph = {
        "app.logs.service": {"app.jobs.service"},
        "app.jobs.service": {"app.jobs.states"},
        "drafting.serving.smoke": {"drafting.serving.prompts.chat", "drafting.ml.x"},
        "workers.runner": {"drafting.proc", "app.jobs.service"},
    }
    assert package_cycles(graph, PLANTED_PACKAGES) == []
    assert module_cycles(graph) == []


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
        ("app.artifacts.service", "from app.jobs import repository as jobs_repo"),
        ("app.jobs.path_rules", "from app.hosts.repository import get"),
        ("app.jobs.router", "from ..jobs import repository"),  # relative imports are resolved too
        ("bench.sweep_cpu", "from tests.serving.tiny import make_pair"),
        ("bench.load", "import tests.reliability._stack"),
        ("testsupport.tiny_pair", "from tests.conftest import make_token"),
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
    assert not violations("from app.jobs import service as jobs", "app.servers.service")
    assert not violations("from app.jobs import repository", "app.jobs.lifecycle")
    assert not violations("from pydantic import BaseModel", "contract.params.common")
    assert not violations("from testsupport.tiny_pair import make_pair\nimport torch", "bench.sweep_cpu")
    assert not violations("from app.core.config import Settings", "bench._harness")
    assert not violations("from cli.demo.constructed import chat", "testsupport.random_llama")


def test_a_relative_import_in_a_package_init_starts_at_the_package() -> None:
    assert "app.jobs.service" in set(imports_of("from .service import get_job", "app.jobs", package=True))
    assert "app.jobs.service" in set(imports_of("from .service import get_job", "app.jobs.router"))


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
