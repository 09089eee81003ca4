"""A target folder's language model, found and built the way transformers builds it.

Targets nest their language model in many ways: at the top of config.json (Llama, Qwen, DeepSeek-V3…), or
under `text_config` with its weights under a wrapper's prefix (Gemma3ForConditionalGeneration and Llava
save `language_model.model.*`; transformers 5's own multimodal classes name them `model.language_model.*`;
moonshotai/Kimi-K2.5 keeps `language_model.model.*` and `language_model.lm_head.*`, which SGLang's
kimi_k25.py strips and transformers' conversion_mapping.py renames). eyas works on the text model alone:
extract, eval and the reference engine run it, the trainer takes its final norm and head.

- **The class** is transformers' own for the text config: its `model_type` (through AutoModelForCausalLM's
  mapping), else the `architectures` it names when transformers ships that class (Kimi-K2.5's text config
  says model_type `kimi_k2`, a name only its hub code knows, and architecture `DeepseekV3ForCausalLM`).
  No checkpoint code runs then, even where config.json has an `auto_map`. Only a text model transformers
  does not ship needs the checkpoint's code, and that needs `trust_remote_code` (a param the host's
  settings must allow): never transformers' interactive question.
- **The names**: the class, built on the meta device, says which modules are the input embedding, the
  decoder's final norm and the head; the checkpoint's own tensor names (its index, or the safetensors
  header) say under which prefix they are stored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

from drafting.ml._config import text_config
from drafting.userfiles import Cap, check_model_folder, check_regular, read_user_json_object

# config.json fields that name the checkpoint rather than describe the text model
_NOT_MODEL_FIELDS = ("model_type", "auto_map", "architectures", "transformers_version", "_name_or_path")


class TargetModelError(ValueError):
    """A target whose text model eyas cannot find, build or fill: the message says why."""


class RemoteCodeRefused(TargetModelError):
    """The text model needs the checkpoint's own code, and running it was not allowed."""


@dataclass(frozen=True)
class TextModelSpec:
    folder: Path
    config: dict[str, Any]  # config.json as written
    text: dict[str, Any]  # its language-model part (`text_config`, or the whole config)
    model_class: Any | None  # transformers' class of the text model; None: the checkpoint's code builds it
    # (checkpoint prefix, text-model prefix) pairs: the text model's `model.` and `lm_head.` as stored
    renames: tuple[tuple[str, str], ...] = ()

    @property
    def wrapped(self) -> bool:
        return bool(self.renames)

    @property
    def class_name(self) -> str:
        return self.model_class.__name__ if self.model_class is not None else "the checkpoint's own class"

    def checkpoint_name(self, name: str) -> str:
        """A text-model tensor's stored name (`model.norm.weight` -> `language_model.model.norm.weight`)."""
        for stored, own in self.renames:
            if name.startswith(own):
                return stored + name[len(own) :]
        return name

    def key_mapping(self) -> dict[str, str]:
        """transformers' `key_mapping` (checkpoint-name regex -> text-model name) for from_pretrained."""
        return {"^" + re.escape(stored): own for stored, own in self.renames}


def read_target_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not os.path.lexists(path):
        raise TargetModelError(f"{folder} has no config.json (expected a HF model folder)")
    return read_user_json_object(path, Cap.CONFIG, "target config.json")


def shipped_class(text: dict[str, Any]) -> Any | None:
    """transformers' causal-LM class for this text config, or None when transformers ships none."""
    import transformers
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = text.get("model_type")
    if isinstance(model_type, str) and model_type in CONFIG_MAPPING:
        name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
        if name is not None:
            return getattr(transformers, name)
    for name in text.get("architectures") or []:
        found = getattr(transformers, name, None) if isinstance(name, str) and name.isidentifier() else None
        if isinstance(found, type) and issubclass(found, transformers.PreTrainedModel):
            return found
    return None


def _auto_map(config: dict[str, Any], text: dict[str, Any]) -> dict[str, Any]:
    for source in (text, config):
        found = source.get("auto_map")
        if isinstance(found, dict) and found:
            return found
    return {}


def _needs_remote_code(folder: Path, config: dict[str, Any], text: dict[str, Any]) -> str:
    import transformers

    what = f"model_type {text.get('model_type')!r}, architectures {text.get('architectures')}"
    auto_map = _auto_map(config, text)
    if not auto_map:
        raise TargetModelError(
            f"transformers {transformers.__version__} has no class for the text model of {folder} ({what}) "
            "and the folder names no code of its own (config.json has no auto_map)"
        )
    code = auto_map.get("AutoModelForCausalLM") or next(iter(auto_map.values()))
    return (
        f"the text model of {folder} ({what}) is not an architecture transformers "
        f"{transformers.__version__} ships; loading it runs the folder's own code ({code}). eyas runs a "
        "target's code only with trust_remote_code: true, on a host whose settings allow it "
        "(EYAS_ALLOW_REMOTE_CODE=true)"
    )


def text_model_spec(folder: Path | str, *, trust_remote_code: bool = False) -> TextModelSpec:
    """Where the text model of `folder` is and which class builds it. Raises RemoteCodeRefused when only
    the folder's own code can build it and `trust_remote_code` is off."""
    folder = Path(folder)
    config = read_target_config(folder)
    text = text_config(config)
    model_class = shipped_class(text)
    if model_class is None:
        refusal = _needs_remote_code(folder, config, text)
        if not trust_remote_code:
            raise RemoteCodeRefused(refusal)
        return TextModelSpec(folder, config, text, None)
    names = set(weight_files(folder))
    shell = meta_model(TextModelSpec(folder, config, text, model_class))
    return TextModelSpec(folder, config, text, model_class, _renames(folder, names, shell))


def text_config_object(spec: TextModelSpec) -> Any:
    """transformers' config object of the text model (its own config class, from the text fields)."""
    if spec.model_class is None:
        from transformers import AutoConfig

        loaded = AutoConfig.from_pretrained(str(spec.folder), trust_remote_code=True, local_files_only=True)
        return getattr(loaded, "text_config", None) or loaded
    fields = {k: v for k, v in spec.text.items() if k not in _NOT_MODEL_FIELDS}
    config_class = spec.model_class.config_class
    try:
        return config_class(**fields)
    except (TypeError, ValueError) as exc:
        raise TargetModelError(
            f"{config_class.__name__} refuses the text config of {spec.folder}: {exc}"
        ) from exc


def meta_model(spec: TextModelSpec) -> nn.Module:
    """The text model built on the meta device: its modules and names, no memory for weights."""
    config = text_config_object(spec)
    with torch.device("meta"), _quiet_transformers():
        if spec.model_class is None:
            from transformers import AutoModelForCausalLM

            built: nn.Module = AutoModelForCausalLM.from_config(config, trust_remote_code=True)
        else:
            built = spec.model_class(config)
    return built


@dataclass(frozen=True)
class HeadNames:
    """Text-model names of the tensors the trainer needs (map them with TextModelSpec.checkpoint_name)."""

    embed: str
    norm: str  # the decoder's final norm module
    lm_head: str
    tied: bool  # the head is the input embedding


def head_names(model: nn.Module) -> HeadNames:
    modules = {id(module): name for name, module in model.named_modules()}
    embed = model.get_input_embeddings()  # type: ignore[operator]
    head = model.get_output_embeddings()  # type: ignore[operator]
    decoder = model.get_decoder()  # type: ignore[operator]
    norm = getattr(decoder, "norm", None)
    kind = type(model).__name__
    if not isinstance(norm, nn.Module) or id(norm) not in modules:
        raise TargetModelError(f"{kind}'s decoder has no final norm module `norm` for eyas to apply")
    if not isinstance(head, nn.Module) or id(head) not in modules:
        raise TargetModelError(f"{kind} has no output head module")
    if getattr(head, "bias", None) is not None:
        raise TargetModelError(f"{kind}'s head has a bias, which eyas's trainer does not apply")
    config = getattr(model, "config", None)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    return HeadNames(
        embed=f"{modules[id(embed)]}.weight",
        norm=modules[id(norm)],
        lm_head=f"{modules[id(head)]}.weight",
        tied=tied,
    )


def _renames(folder: Path, stored: set[str], shell: nn.Module) -> tuple[tuple[str, str], ...]:
    """The (stored prefix, own prefix) pairs under which the checkpoint keeps the text model's decoder and
    head: the decoder is where both the embedding and the final norm sit, under one prefix."""
    names = head_names(shell)
    base = names.embed.split(".", 1)[0] + "."  # `model.` of `model.embed_tokens.weight`
    embed_tail, norm_tail = names.embed[len(base) :], f"{names.norm[len(base) :]}.weight"
    prefixes = sorted(
        name[: -len(embed_tail)]
        for name in stored
        if name.endswith(embed_tail) and name[: -len(embed_tail)] + norm_tail in stored
    )
    prefixes = [p for p in prefixes if p == "" or p.endswith(".")]
    if len(prefixes) != 1:
        found = ", ".join(prefixes) or "none"
        raise TargetModelError(
            f"the checkpoint in {folder} holds {len(prefixes)} sets of {embed_tail} + {norm_tail} "
            f"(prefixes: {found}); eyas needs exactly one, the text model's"
        )
    decoder = prefixes[0]
    renames = [] if decoder == base else [(decoder, base)]
    head_prefix = names.lm_head[: -len("weight")]  # `lm_head.`
    if not names.tied and names.lm_head not in stored:
        wrapper = decoder[: -len(base)] if decoder.endswith(base) else ""
        if wrapper + names.lm_head in stored:
            renames.append((wrapper + head_prefix, head_prefix))
    return tuple(renames)


def weight_files(folder: Path) -> dict[str, Path]:
    """tensor name -> file holding it (the shard index when there is one, else model.safetensors)."""
    index = folder / "model.safetensors.index.json"
    if os.path.lexists(index):
        weight_map = read_user_json_object(index, Cap.CONFIG, index.name).get("weight_map")
        if not isinstance(weight_map, dict):
            raise TargetModelError(f"{index} has no weight_map object")
        files = {name: folder / str(file) for name, file in weight_map.items()}
        for path in set(files.values()):
            if os.path.lexists(path):  # a shard that is missing fails when a tensor in it is read
                check_regular(path, Cap.WEIGHTS, "weight file")
        return files
    single = folder / "model.safetensors"
    if not os.path.lexists(single):
        raise TargetModelError(f"{folder} has neither model.safetensors nor model.safetensors.index.json")
    check_regular(single, Cap.WEIGHTS, "weight file")  # safetensors' open would wait on a FIFO
    with safe_open(str(single), framework="pt") as handle:
        return dict.fromkeys(handle.keys(), single)


def read_tensor(files: dict[str, Path], name: str) -> torch.Tensor:
    if name not in files:
        raise TargetModelError(f"the target's checkpoint has no tensor {name}")
    check_regular(files[name], Cap.WEIGHTS, "weight file")
    with safe_open(str(files[name]), framework="pt") as handle:
        tensor: torch.Tensor = handle.get_tensor(name)
        return tensor


def load_text_model(
    folder: Path | str, *, dtype: torch.dtype, trust_remote_code: bool = False, log: Any = None
) -> nn.Module:
    """The text model with the checkpoint's weights (on the CPU, eval mode). A wrapped checkpoint loads its
    language model alone (a vision tower's tensors are left out); a tensor the text model needs and the
    checkpoint lacks is an error, never a random weight."""
    folder = Path(folder)
    check_model_folder(folder, "target model folder")  # transformers would wait on a FIFO config.json
    spec = text_model_spec(folder, trust_remote_code=trust_remote_code)
    if spec.model_class is None:
        from transformers import AutoModelForCausalLM

        remote: nn.Module = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=dtype, trust_remote_code=True, local_files_only=True
        )
        return remote.eval()
    with _quiet_transformers():
        model, info = spec.model_class.from_pretrained(
            str(folder),
            config=text_config_object(spec),
            dtype=dtype,
            key_mapping=spec.key_mapping() or None,
            trust_remote_code=False,
            local_files_only=True,
            output_loading_info=True,
        )
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        shown = ", ".join(spec.checkpoint_name(name) for name in missing[:5])
        raise TargetModelError(
            f"the checkpoint in {folder} lacks {len(missing)} tensors {spec.class_name} needs ({shown}…)"
        )
    if log is not None and spec.wrapped:
        left = len(info.get("unexpected_keys") or ())
        stored = ", ".join(f"{s}* as {o}*" for s, o in spec.renames)
        log(f"target: the text model {spec.class_name}, read from {stored}; {left} other tensors left out")
    loaded: nn.Module = model.eval()
    return loaded


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' load report lists every tensor a wrapper keeps beside its text model (a vision tower)
    as unexpected; eyas reports what it left out itself and fails on what is missing."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def load_tokenizer(folder: Path | str, *, trust_remote_code: bool = False) -> Any:
    """The tokenizer in `folder`, with trust_remote_code always given (transformers asks on the terminal
    when it is left unset and the folder names tokenizer code). A tokenizer that needs its folder's code
    when that is not allowed raises RemoteCodeRefused."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(
            str(folder), trust_remote_code=trust_remote_code, local_files_only=True
        )
    except ValueError as exc:
        if trust_remote_code or "trust_remote_code" not in str(exc):
            raise
        raise RemoteCodeRefused(
            f"the tokenizer in {folder} needs the folder's own code; eyas runs a target's code only with "
            "trust_remote_code: true, on a host whose settings allow it (EYAS_ALLOW_REMOTE_CODE=true)"
        ) from None
