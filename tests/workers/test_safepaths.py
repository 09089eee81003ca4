"""drafting/safepaths.py against real folders and real symlinks: a path is resolved beneath its allowed root
once, at the moment of use, and what was resolved is what is used, whatever happens to the name after.

The race tests flip a symlink under the root between a folder inside it and one outside it, from another
thread, while the guard pins and writes; the deterministic ones flip it at the worst moment on purpose and
show that the old way (check by name, then open by name) writes outside where the guard does not.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.paths import install_paths
from contract.reasons import TerminationReason
from drafting.context import StageContext, StageError
from drafting.safepaths import PathGuard, PathRefused, kernel_resolves_beneath, open_beneath

pytestmark = pytest.mark.timeout(120)
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2

KERNELS = [
    pytest.param(
        True,
        id="openat2",
        marks=pytest.mark.skipif(not kernel_resolves_beneath(), reason="openat2 not available here"),
    ),
    pytest.param(False, id="nofollow-walk"),
]


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """root/ (the allowed root) with inside/ in it, outside/ beside it, and root/link -> inside."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "inside").mkdir(parents=True)
    outside.mkdir()
    (root / "link").symlink_to(root / "inside")
    return {"root": root, "inside": root / "inside", "outside": outside, "link": root / "link"}


def point(link: Path, target: Path) -> None:
    """Re-point `link` atomically (a new link renamed over it): the name always exists."""
    fresh = link.with_name(f".{link.name}.{threading.get_ident()}")
    fresh.symlink_to(target)
    os.replace(fresh, link)


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE): each name always exists."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


@pytest.fixture
def flipper(layout: dict[str, Path]) -> Iterator[threading.Event]:
    """A thread swapping, as fast as it can, which of root/link and root/inside is the real folder inside
    the root and which is a symlink to outside/ (so both the openat2 resolution, which follows links that
    stay inside, and the O_NOFOLLOW walk, which follows none, meet a name that sometimes leads out)."""
    point(layout["link"], layout["outside"])
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            exchange(layout["inside"], layout["link"])
            os.sched_yield()

    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    yield stop
    stop.set()
    thread.join(10)
    assert not thread.is_alive()


def real_folder(layout: dict[str, Path]) -> Path:
    return next(p for p in (layout["inside"], layout["link"]) if not p.is_symlink())


@pytest.mark.parametrize("kernel", KERNELS)
def test_open_beneath_never_leaves_the_folder(layout: dict[str, Path], kernel: bool) -> None:
    root_fd = os.open(layout["root"], os.O_PATH | os.O_DIRECTORY)
    try:
        (layout["outside"] / "secret").write_text("outside")
        (layout["root"] / "abs").symlink_to(layout["outside"])
        (layout["root"] / "rel").symlink_to("../outside")
        for escape in ("abs/secret", "rel/secret", "../outside/secret"):
            with pytest.raises(OSError, match=r"\[Errno (18|40)\]") as caught:
                open_beneath(root_fd, escape, os.O_RDONLY, kernel=kernel, root_paths=[str(layout["root"])])
            assert caught.value.errno in (errno.EXDEV, errno.ELOOP), escape
        (layout["inside"] / "file").write_text("in")
        fd = open_beneath(root_fd, "inside/file", os.O_RDONLY, kernel=kernel)
        assert os.read(fd, 10) == b"in"
        os.close(fd)
        roots = [str(layout["root"])]
        for inside in ("link/file", "rel-in/file"):  # absolute and relative links that stay inside
            (layout["root"] / "rel-in").unlink(missing_ok=True)
            (layout["root"] / "rel-in").symlink_to("inside")
            fd = open_beneath(root_fd, inside, os.O_RDONLY, kernel=kernel, root_paths=roots)
            assert os.read(fd, 10) == b"in"
            os.close(fd)
        with pytest.raises(OSError, match=r"\[Errno 18\]"):  # an absolute link, with no root to judge it by
            open_beneath(root_fd, "link/file", os.O_RDONLY, kernel=kernel)
        (layout["root"] / "loop").symlink_to("loop")
        with pytest.raises(OSError, match=r"\[Errno 40\]"):
            open_beneath(root_fd, "loop", os.O_RDONLY, kernel=kernel, root_paths=roots)
    finally:
        os.close(root_fd)


def test_the_old_check_then_use_writes_outside_and_the_guard_does_not(
    layout: dict[str, Path], tmp_path: Path
) -> None:
    """The race, at its worst moment on purpose: the link flips right after the check."""
    ctx = StageContext(work_dir=tmp_path / "work", allowed_roots=[layout["root"]])
    checked = ctx.check_path(layout["link"] / "old-way")  # the preflight check of before: passes
    assert checked.parent == layout["inside"]
    point(layout["link"], layout["outside"])
    (layout["link"] / "old-way").write_text("x")  # the later write, by name
    assert (layout["outside"] / "old-way").exists()  # ... lands outside every root

    point(layout["link"], layout["inside"])
    guard = PathGuard([layout["root"]])
    pinned = guard.output_parent(layout["link"] / "new-way")  # the moment of use: parent resolved, held
    point(layout["link"], layout["outside"])
    pinned.write_text("x")
    assert (layout["inside"] / "new-way").read_text() == "x"
    assert not (layout["outside"] / "new-way").exists()
    assert guard.describe(f"wrote {pinned}") == f"wrote {layout['link'] / 'new-way'}"

    with pytest.raises(PathRefused) as caught:  # pinned while it points outside: refused, not followed
        guard.output_parent(layout["link"] / "later")
    assert caught.value.reason is TerminationReason.PATH_NOT_ALLOWED
    assert str(layout["link"] / "later") in caught.value.message
    guard.close()


@pytest.mark.parametrize("kernel", KERNELS)
def test_thousands_of_pins_against_a_flipping_link_never_write_outside(
    layout: dict[str, Path],
    tmp_path: Path,
    flipper: threading.Event,
    kernel: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("drafting.safepaths._kernel_resolves", kernel)
    written = refused = 0
    for i in range(3000):
        guard = PathGuard([layout["root"]])
        try:
            target = guard.output_parent(layout["link"] / f"f{i}")
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            os.close(fd)
            written += 1
        except PathRefused:
            refused += 1
        finally:
            guard.close()
    flipper.set()
    assert list(layout["outside"].iterdir()) == []
    assert len(list(real_folder(layout).iterdir())) == written
    assert written > 0  # pinned while root/link was the real folder
    assert refused > 0  # pinned while it was the symlink leading out


def test_an_input_view_keeps_reading_what_was_pinned(layout: dict[str, Path], tmp_path: Path) -> None:
    """transformers and safetensors, handed a view, read the folder that was resolved, not the name's new
    target: the user's folder is renamed away and another put in its place after the pin."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=64
    )
    LlamaForCausalLM(config).save_pretrained(layout["inside"] / "model")
    guard = PathGuard([layout["root"]])
    view = guard.input(layout["link"] / "model")
    os.rename(layout["inside"] / "model", layout["inside"] / "moved")
    (layout["outside"] / "model").mkdir()
    (layout["outside"] / "model" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    point(layout["link"], layout["outside"])

    model = AutoModelForCausalLM.from_pretrained(view)
    assert model.config.hidden_size == 16
    with safe_open(str(view / "model.safetensors"), framework="pt") as handle:
        assert "lm_head.weight" in set(handle.keys())
    assert guard.describe(str(view / "config.json")) == str(layout["link"] / "model" / "config.json")
    guard.close()


def test_inputs_outside_the_roots_are_refused_and_missing_ones_stay_missing(
    layout: dict[str, Path], tmp_path: Path
) -> None:
    guard = PathGuard([layout["root"]])
    with pytest.raises(PathRefused, match="outside the host's allowed roots"):
        guard.input(layout["outside"])
    (layout["root"] / "escape").symlink_to(layout["outside"])
    with pytest.raises(PathRefused, match="through a symlink"):
        guard.input(layout["root"] / "escape" / "x")
    missing = guard.input(layout["root"] / "nothing-here")
    assert not missing.exists()
    assert guard.describe(str(missing)) == str(layout["root"] / "nothing-here")
    guard.close()


def test_outputs_are_refused_in_the_data_dir_the_install_and_as_a_root(tmp_path: Path) -> None:
    """Judged where the output really is: through a symlink inside the root that leads into the data dir."""
    root = tmp_path / "root"
    data = root / "data"
    data.mkdir(parents=True)
    (root / "alias").symlink_to(data)
    second = tmp_path / "second-root"
    second.mkdir()
    guard = PathGuard([root, second], data_dir=data)
    cases = {
        data: "data directory",
        data / "jobs" / "x": "data directory",
        root / "alias" / "x": "data directory",  # lexically fine, really inside the data dir
        second: "allowed root",
        root: "data directory",  # it holds the data directory, and it is an allowed root too
    }
    for path, words in cases.items():
        with pytest.raises(PathRefused, match=words) as caught:
            guard.output_parent(path)
        assert caught.value.reason is TerminationReason.PATH_NOT_ALLOWED
    assert not (data / "jobs").exists()
    package = next(p for p in install_paths() if p.endswith("/drafting"))
    everywhere = PathGuard([Path("/")])
    with pytest.raises(PathRefused, match="install"):
        everywhere.output_parent(Path(package) / "new-output")
    guard.close()
    everywhere.close()


def test_an_output_folder_is_eyas_own_or_refused(tmp_path: Path) -> None:
    """A stage's output folder: made new and marked, taken up again when marked, refused when it holds a
    user's files or is a symlink; the user's folder is left as it was."""
    root = tmp_path / "root"
    root.mkdir()
    ctx = StageContext(work_dir=tmp_path / "work", allowed_roots=[root], job_id="job-1")
    made = ctx.output_folder(root / "a" / "b" / "out", "extract")
    (made / "f").write_text("x")
    marker = json.loads((root / "a" / "b" / "out" / ".eyas-output.json").read_text())
    assert marker == {**marker, "made_by": "eyas", "kind": "extract", "job_id": "job-1"}
    assert (ctx.output_folder(root / "a" / "b" / "out", "extract") / "f").read_text() == "x"

    users = root / "users"
    users.mkdir()
    (users / "thesis.tex").write_text("mine")
    with pytest.raises(StageError) as caught:
        ctx.output_folder(users, "train")
    assert caught.value.reason is TerminationReason.BAD_INPUT
    assert "eyas did not write" in caught.value.message
    assert sorted(p.name for p in users.iterdir()) == ["thesis.tex"]
    (root / "ln").symlink_to(root / "a" / "b" / "out")
    with pytest.raises(StageError, match="symlink"):
        ctx.output_folder(root / "ln", "train")
    ctx.paths.close()
