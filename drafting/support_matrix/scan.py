"""Reading an SGLang release's model classes from its source, without importing it.

SGLang picks a target's class by `architectures[0]` among the `EntryClass` names of its `srt/models/*.py`
modules (models/registry.py `import_model_classes`), and refuses EAGLE-3 at start-up for a class without
`set_eagle3_layers_to_capture` (0.5.14 model_runner.py calls it unguarded: AttributeError; 0.5.23
model_runner_components/attention_backend_setup.py `configure_aux_hidden_state_capture`: ValueError).
This module finds, for every entry class, the class in its bases that defines that method (or none), and
fingerprints the modules whose capture code a person read, so a change in a release shows up as data.
Importing sglang would need CUDA-era dependencies; `ast` needs only the files.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

CAPTURE_METHOD = "set_eagle3_layers_to_capture"
MODELS_PACKAGE = "sglang.srt.models"


@dataclass
class _Module:
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, name)
    entry: list[str] = field(default_factory=list)
    source_digest: str = ""


@dataclass(frozen=True)
class ReleaseScan:
    """What one release's model sources say: each served architecture and where its capture hook lives."""

    hooks: dict[str, str | None]  # EntryClass name -> "module.Class" defining the capture hook, or None
    modules: dict[str, str]  # EntryClass name -> the module defining the class
    module_digests: dict[str, str]  # module -> digest of its source bytes
    unreadable: tuple[str, ...] = ()  # modules that did not parse


def installed_models_dir() -> Path | None:
    """`sglang/srt/models` of the installed sglang, found without importing it (None when absent)."""
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "srt" / "models"
    return folder if folder.is_dir() else None


def scan_release(models_dir: Path) -> ReleaseScan:
    """Every EntryClass architecture of the release in `models_dir`, resolved through its bases."""
    modules: dict[str, _Module] = {}
    unreadable: list[str] = []
    for path in sorted(models_dir.glob("*.py")):
        try:
            modules[path.stem] = _read_module(path)
        except (SyntaxError, UnicodeDecodeError, OSError):
            unreadable.append(path.stem)
    hooks: dict[str, str | None] = {}
    defined_in: dict[str, str] = {}
    for name, module in modules.items():
        for entry in module.entry:
            resolved = _resolve(modules, name, entry)
            if resolved is not None:
                hooks[resolved[1]] = _find_definer(modules, resolved, set())
                defined_in[resolved[1]] = resolved[0]
    digests = {name: module.source_digest for name, module in modules.items()}
    return ReleaseScan(dict(sorted(hooks.items())), defined_in, digests, tuple(unreadable))


def _read_module(path: Path) -> _Module:
    raw = path.read_bytes()
    # utf-8-sig: some model files start with a byte-order mark
    tree = ast.parse(raw.decode("utf-8-sig"))
    # The source's bytes, not its syntax tree: ast.dump differs between Python releases (3.12 adds
    # type_params), and a table recorded on one Python must check on another.
    module = _Module(source_digest=hashlib.sha256(raw).hexdigest()[:16])
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            module.classes[node.name] = node
        elif isinstance(node, ast.ImportFrom):
            source = _models_module(node)
            for alias in node.names if source else ():
                module.imports[alias.asname or alias.name] = (source, alias.name)
        elif isinstance(node, ast.Assign | ast.AugAssign):
            module.entry += _entry_names(node)
    return module


def _models_module(node: ast.ImportFrom) -> str:
    """The sibling model module an import names ("" for anything else)."""
    name = node.module or ""
    if node.level == 1:
        return name.split(".")[0]
    if node.level == 0 and name.startswith(MODELS_PACKAGE + "."):
        return name[len(MODELS_PACKAGE) + 1 :].split(".")[0]
    return ""


def _entry_names(node: ast.Assign | ast.AugAssign) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if not any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in targets):
        return []
    value = node.value
    items = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
    return [item.id for item in items if isinstance(item, ast.Name)]


def _resolve(modules: dict[str, _Module], module: str, name: str) -> tuple[str, str] | None:
    """(module, class name) where `name`, as seen from `module`, is defined; None outside the models."""
    seen: set[tuple[str, str]] = set()
    while (module, name) not in seen:
        seen.add((module, name))
        current = modules.get(module)
        if current is None:
            return None
        if name in current.classes:
            return module, name
        if name not in current.imports:
            return None
        module, name = current.imports[name]
    return None


def _find_definer(
    modules: dict[str, _Module], where: tuple[str, str], seen: set[tuple[str, str]]
) -> str | None:
    """Depth-first, left-to-right through the bases (Python's MRO for the single-line hierarchies here)."""
    if where in seen:
        return None
    seen.add(where)
    node = modules[where[0]].classes[where[1]]
    if any(isinstance(item, ast.FunctionDef) and item.name == CAPTURE_METHOD for item in node.body):
        return f"{where[0]}.{where[1]}"
    for base in node.bases:
        if not isinstance(base, ast.Name):
            continue
        resolved = _resolve(modules, where[0], base.id)
        found = _find_definer(modules, resolved, seen) if resolved else None
        if found is not None:
            return found
    return None
