"""What each SGLang release does with an EAGLE-3 draft checkpoint: one table keyed by version range.

Every row was read from the released wheel's `sglang/srt/models/llama_eagle3.py` (and `models/llama.py`
for the target side). A new SGLang release is a data change: read its `LlamaForCausalLMEagle3`, then add
a row or widen the last one and move `VERIFIED_UP_TO`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Version = tuple[int, int, int]

# Options a draft config can switch on. SGLang implements some of them from some release on.
FC_NORM = "fc_norm"  # per-aux RMSNorm before fc (EAGLE 3.1); legacy name `use_aux_norm`
NORM_OUTPUT = "norm_output"  # feed the normed hidden state to the next draft step
NORM_BEFORE_FC = "norm_before_fc"  # one RMSNorm over the concatenated aux states (`input_norm`)
NORM_BEFORE_RESIDUAL = "norm_before_residual"  # residual taken after hidden_norm (speculators option)

DRAFT_ARCHITECTURE = "LlamaForCausalLMEagle3"
DEFAULT_NUM_AUX = 3

# Module roots a draft's own weights live under; a name under one of them that SGLang cannot place is a
# lost weight (error), any other unplaced name is only clutter (warning).
DRAFT_WEIGHT_ROOTS = ("fc", "midlayer", "layers", "norm", "lm_head", "input_norm", "fc_norm", "embed_tokens")

# Prefixes trainers put in front of the names (DDP/accelerate `module.`, SpecForge's wrapper
# `draft_model.`, torch.compile `_orig_mod.`, FSDP); SGLang strips none of them.
TRAINER_PREFIXES = ("draft_model.", "module.", "_orig_mod.", "_fsdp_wrapped_module.", "model.")

# Tensors trainers save that no SGLang release uses: dropped by fix_keys.
UNUSED_BY_SGLANG = ("t2d", "verifier_lm_head.weight", "verifier_norm.weight")

# Target families whose `set_eagle3_layers_to_capture` does not simply add 1 to every id
# (sglang models/deepseek_v2.py adds 1 only when ids[0] == 1; gpt_oss.py keeps raw ids that reach
# num_layers). Explicit ids for these targets deserve a second look.
TARGETS_WITH_OWN_ID_RULES = (
    "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "KimiK25ForConditionalGeneration",
    "GptOssForCausalLM",
)


@dataclass(frozen=True)
class SGLangRules:
    """How one range of SGLang releases builds and loads `LlamaForCausalLMEagle3`."""

    first: Version
    last: Version | None  # inclusive; None means "and every later release"
    layer_module: str  # "midlayer" (params model.midlayer.*) or "layers" (model.layers.{i}.*)
    legacy_renames: tuple[tuple[str, str], ...]  # substring renames load_weights applies first
    max_layers: int | None
    num_aux_configurable: bool  # fc width = target_hidden * K with K from the config (else K = 3)
    options: frozenset[str]
    draft_window_flag: bool  # --speculative-draft-window-size applies to this draft class
    read_from: str

    def covers(self, version: Version) -> bool:
        return self.first <= version and (self.last is None or version <= self.last)

    def layer_prefix(self, index: int) -> str:
        """The parameter prefix SGLang gives decoder layer `index` (without `model.`)."""
        return "midlayer." if self.layer_module == "midlayer" else f"layers.{index}."


_LEGACY_RENAMES = (
    ("midlayer", "layers.0"),
    ("aux_norm_low", "fc_norm.0"),
    ("aux_norm_mid", "fc_norm.1"),
    ("aux_norm_high", "fc_norm.2"),
)

RULES: tuple[SGLangRules, ...] = (
    SGLangRules(
        first=(0, 5, 0),
        last=(0, 5, 11),
        layer_module="midlayer",
        legacy_renames=(),
        max_layers=1,
        num_aux_configurable=False,
        options=frozenset(),
        draft_window_flag=False,
        read_from="sglang 0.5.1, 0.5.5, 0.5.11 wheels",
    ),
    SGLangRules(
        first=(0, 5, 12),
        last=(0, 5, 16),
        layer_module="layers",
        legacy_renames=_LEGACY_RENAMES,
        max_layers=None,
        num_aux_configurable=True,
        options=frozenset({FC_NORM, NORM_OUTPUT}),
        draft_window_flag=True,
        read_from="sglang 0.5.12, 0.5.15, 0.5.16 wheels",
    ),
    SGLangRules(
        first=(0, 5, 17),
        last=None,
        layer_module="layers",
        legacy_renames=_LEGACY_RENAMES,
        max_layers=None,
        num_aux_configurable=True,
        options=frozenset({FC_NORM, NORM_OUTPUT, NORM_BEFORE_FC}),
        draft_window_flag=True,
        read_from="sglang 0.5.17, 0.5.18, 0.5.23 wheels",
    ),
)

VERIFIED_UP_TO: Version = (0, 5, 23)

# What every release loads: the layout fix_keys writes.
PORTABLE_LAYER_MODULE = "midlayer"

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:\.?(?:post|rc|dev)\d*)?$")


def parse_version(text: str) -> Version:
    """'0.5.12', 'v0.5.12' or '0.5.12.post1' -> (0, 5, 12); ValueError otherwise."""
    match = _VERSION.match(text.strip())
    if not match:
        raise ValueError(f"not an SGLang version: {text!r} (expected e.g. 0.5.14)")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def format_version(version: Version) -> str:
    return ".".join(str(part) for part in version)


def rules_for(version: str | Version) -> SGLangRules:
    """The row that covers `version`; ValueError for releases before the table (0.5.0)."""
    parsed = parse_version(version) if isinstance(version, str) else version
    for rules in RULES:
        if rules.covers(parsed):
            return rules
    raise ValueError(
        f"SGLang {format_version(parsed)} is older than the releases eyas knows (0.5.0 and later)"
    )


def is_verified(version: str | Version) -> bool:
    """Whether the release lies inside the range somebody actually read."""
    parsed = parse_version(version) if isinstance(version, str) else version
    return parsed <= VERIFIED_UP_TO
