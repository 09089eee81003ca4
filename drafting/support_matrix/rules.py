"""How an SGLang target class turns a draft's aux-layer ids into the states it hands the draft.

Every rule here was read from SGLang's model sources (the modules each release table lists under "read").
Two things vary by class and release:

* the id rule: `set_eagle3_layers_to_capture(layer_ids)` turns the draft config's
  `eagle_config.eagle_aux_hidden_state_layer_ids` into `layers_to_capture`; the forward loop then captures a
  state *before* decoder layer i for every i in it. Most classes add 1 to every id (so an id names the output
  of decoder layer id); DeepSeek-V2/V3 (and the classes wrapping them) add 1 only when ids[0] == 1 and keep
  the ids as they are otherwise (deepseek_v2.py); GPT-OSS from 0.5.23 keeps them when max(ids) equals the
  layer count (gpt_oss.py). With no ids, every class captures before layers [2, n//2, n-3], except
  MiniMax-M3-VL from 0.5.23, which adds 1 to that default too (minimax_m3_vl.py).
* what is captured before layer i: the residual stream (`hidden_states + residual`, the output of layer
  i-1, which is HF's `output_hidden_states[i]`) for every class read, except Gemma3 from 0.5.23, whose
  decoder layer returns its post-feedforward branch and the residual apart and whose loop appends the branch
  alone (gemma3_causal.py `Gemma3TextModel.forward`): the output of layer i-1's `post_feedforward_layernorm`,
  without the residual (before layer 0: the embeddings). In 0.5.14 the same layer adds the residual itself
  and returns the stream, so 0.5.14 captures the residual stream for Gemma3 too.

eyas names capture points by the `layers_to_capture` value, which equals the HF hidden-state index.
"""

from __future__ import annotations

from enum import StrEnum


class IdRule(StrEnum):
    PLUS_ONE = "plus_one"  # layers_to_capture = [id + 1 for id in ids]
    PLUS_ONE_IF_FIRST_IS_ONE = "plus_one_if_first_is_one"  # DeepSeek-V2/V3: +1 only when ids[0] == 1
    KEEP_IF_MAX_IS_LAYER_COUNT = "keep_if_max_is_layer_count"  # GPT-OSS 0.5.23: ids kept when max(ids) == n


class DefaultLayers(StrEnum):
    STANDARD = "2, n//2, n-3"
    SHIFTED = "3, n//2+1, n-2"  # the standard default, then +1 (MiniMax-M3-VL 0.5.23)


class CaptureKind(StrEnum):
    RESIDUAL_STREAM = "residual_stream"  # hidden_states + residual before layer i: HF hidden_states[i]
    BLOCK_BRANCH = "block_branch"  # layer i-1's post-feedforward branch without the residual (Gemma3 0.5.23)


# The HF submodule whose output is the block branch: Gemma3DecoderLayer adds the residual right after it
# (transformers models/gemma3/modeling_gemma3.py `Gemma3DecoderLayer.forward`).
BLOCK_BRANCH_MODULE = "post_feedforward_layernorm"

ID_RULE_TEXT = {
    IdRule.PLUS_ONE: "id + 1",
    IdRule.PLUS_ONE_IF_FIRST_IS_ONE: "id + 1 when ids[0] == 1, else the ids as they are",
    IdRule.KEEP_IF_MAX_IS_LAYER_COUNT: "the ids as they are when max(ids) == n, else id + 1",
}

CAPTURE_TEXT = {
    CaptureKind.RESIDUAL_STREAM: "the residual stream before layer id+1 (hidden_states + residual)",
    CaptureKind.BLOCK_BRANCH: "the post-feedforward branch of layer id, without the residual",
}


def default_layers(default: DefaultLayers, num_layers: int) -> list[int]:
    """What the class captures when the draft config names no ids."""
    n = num_layers
    standard = [2, n // 2, n - 3]
    return standard if default is DefaultLayers.STANDARD else [i + 1 for i in standard]


def layers_to_capture(rule: IdRule, ids: list[int], num_layers: int) -> list[int]:
    """SGLang's `set_eagle3_layers_to_capture` for explicit ids: the layers whose input it captures."""
    if rule is IdRule.PLUS_ONE_IF_FIRST_IS_ONE and not (ids and ids[0] == 1):
        return list(ids)
    if rule is IdRule.KEEP_IF_MAX_IS_LAYER_COUNT and ids and max(ids) == num_layers:
        return list(ids)
    return [i + 1 for i in ids]


def ids_for_layers(rule: IdRule, layers: list[int]) -> list[int]:
    """The ids to save so that the class captures exactly `layers` (sorted HF indices in 1..n-1).

    ValueError when no id list does it; `layers_to_capture(rule, ids_for_layers(rule, L), n) == L`.
    """
    plus_one = [i - 1 for i in layers]
    if rule is not IdRule.PLUS_ONE_IF_FIRST_IS_ONE or plus_one[0] == 1:
        # KEEP_IF_MAX_IS_LAYER_COUNT adds 1 too: ids of layers below n never reach n
        return plus_one
    if layers[0] == 1:
        raise ValueError(
            "the class captures layer 1 only for ids that do not start with 1, and an id list that "
            "starts with 0 is kept as it is: layer 1 cannot be the first aux layer; pick layers from 2 on"
        )
    return list(layers)
