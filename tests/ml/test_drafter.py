"""The drafter module: SGLang's forward semantics, the TTT unroll, the checkpoint layout, aux capture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

from drafting.ml import _attention
from drafting.ml.drafter import Eagle3Drafter, aux_hidden_states, load_drafter, save_drafter

SGLANG_KEYS = {
    "fc.weight": (32, 96),
    "midlayer.input_layernorm.weight": (32,),
    "midlayer.hidden_norm.weight": (32,),
    "midlayer.post_attention_layernorm.weight": (32,),
    "midlayer.self_attn.q_proj.weight": (32, 64),
    "midlayer.self_attn.k_proj.weight": (16, 64),
    "midlayer.self_attn.v_proj.weight": (16, 64),
    "midlayer.self_attn.o_proj.weight": (32, 32),
    "midlayer.mlp.gate_proj.weight": (64, 32),
    "midlayer.mlp.up_proj.weight": (64, 32),
    "midlayer.mlp.down_proj.weight": (32, 64),
    "norm.weight": (32,),
    "lm_head.weight": (100, 32),
    "d2t": (100,),
}


@pytest.fixture
def drafter(tiny_target: LlamaForCausalLM) -> Eagle3Drafter:
    torch.manual_seed(1)
    model = Eagle3Drafter.from_target_config(
        tiny_target.config.to_dict(), draft_vocab_size=100, aux_layer_ids=[2, 4, 5]
    )
    for param in model.parameters():  # norms start at 1; random weights make the norm checks bite
        if param.requires_grad:
            torch.nn.init.normal_(param, std=0.3)
    model.set_target_embeddings(tiny_target.get_input_embeddings().weight)
    model.set_vocab_mapping(torch.arange(100) * 2 - torch.arange(100))  # draft i -> target 2i
    return model.eval()


def _sglang_reference(model: Eagle3Drafter, ids: torch.Tensor, aux: torch.Tensor) -> tuple:
    """SGLang's LlamaForCausalLMEagle3 forward written out step by step (fused residual adds and all),
    with transformers' own rope and GQA helpers, so it shares no code with the module under test."""
    layer, attn = model.midlayer, model.midlayer.self_attn
    hidden = model.fc(aux)
    residual = hidden
    x = torch.cat([layer.input_layernorm(model.embed_tokens(ids)), layer.hidden_norm(hidden)], dim=-1)
    b, s, _ = x.shape
    q = attn.q_proj(x).view(b, s, attn.num_heads, attn.head_dim).transpose(1, 2)
    k = attn.k_proj(x).view(b, s, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
    v = attn.v_proj(x).view(b, s, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, attn.head_dim, 2).float() / attn.head_dim))
    angles = torch.arange(s).float()[:, None] * inv_freq
    emb = torch.cat([angles, angles], dim=-1)[None]
    q, k = apply_rotary_pos_emb(q, k, emb.cos(), emb.sin())
    groups = attn.num_heads // attn.num_kv_heads
    scores = q @ repeat_kv(k, groups).transpose(-1, -2) * attn.head_dim**-0.5
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    attended = (scores.softmax(-1) @ repeat_kv(v, groups)).transpose(1, 2).reshape(b, s, -1)
    residual = attn.o_proj(attended) + residual  # post_attention_layernorm(h, residual) fuses this add
    mlp_out = layer.mlp(layer.post_attention_layernorm(residual))
    pre_norm = mlp_out + residual  # model.norm(h, residual) fuses this one
    return model.lm_head(model.norm(pre_norm)), pre_norm


def test_forward_sequence_matches_sglang_semantics(drafter: Eagle3Drafter) -> None:
    ids, aux = torch.randint(0, 256, (2, 12)), torch.randn(2, 12, 96)
    logits, hidden = drafter.forward_sequence(ids, aux)
    ref_logits, ref_hidden = _sglang_reference(drafter, ids, aux)
    assert logits.shape == (2, 12, 100)
    assert hidden.shape == (2, 12, 32)
    torch.testing.assert_close(hidden, ref_hidden, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)


def test_features_of_width_h_skip_fc(drafter: Eagle3Drafter) -> None:
    ids, aux = torch.randint(0, 256, (1, 6)), torch.randn(1, 6, 96)
    from_aux = drafter.forward_sequence(ids, aux)[1]
    from_projected = drafter.forward_sequence(ids, drafter.fc(aux))[1]
    torch.testing.assert_close(from_aux, from_projected)


def test_norm_output_feeds_the_normed_state_as_sglang_does(drafter: Eagle3Drafter) -> None:
    """SGLang 0.5.12+ `LlamaForCausalLMEagle3.forward` hands the next draft step `hidden_states_to_logits if
    self.norm_output else hidden_states_to_aux`: the normed state under `norm_output` (speculators' default).
    It has no weights, so only the forward can honour it; the logits stay the same either way."""
    ids, aux = torch.randint(0, 256, (2, 12)), torch.randn(2, 12, 96)
    plain_logits, plain_hidden = drafter.forward_sequence(ids, aux)
    normed = Eagle3Drafter({**drafter.config, "norm_output": True})
    normed.load_state_dict(drafter.state_dict())
    logits, hidden = normed.eval().forward_sequence(ids, aux)
    ref_logits, ref_pre_norm = _sglang_reference(drafter, ids, aux)
    torch.testing.assert_close(hidden, drafter.norm(ref_pre_norm), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(logits, plain_logits)
    assert not torch.allclose(hidden, plain_hidden, atol=1e-2)  # the two features differ: the check bites


@torch.no_grad()
@pytest.mark.parametrize("norm_output", [False, True])
def test_ttt_steps_equal_incremental_drafting(drafter: Eagle3Drafter, norm_output: bool) -> None:
    """TTT step k at position j must be what SGLang computes when it drafts k tokens after position j:
    the context (target features) at positions 0..j, then one position per drafted token carrying the
    drafter's previous output (normed under `norm_output`)."""
    if norm_output:
        normed = Eagle3Drafter({**drafter.config, "norm_output": True})
        normed.load_state_dict(drafter.state_dict())
        drafter = normed.eval()
    ids, aux = torch.randint(0, 256, (1, 10)), torch.randn(1, 10, 96)
    steps = drafter.forward_ttt(ids, aux, steps=3, attention="dense")
    for j in (0, 4, 6):
        features = [drafter.project(aux[:, : j + 1])]
        tokens = [ids[:, : j + 1]]
        for k in (1, 2):
            features.append(drafter.next_features(steps[k - 1][:, j : j + 1]))
            tokens.append(ids[:, j + k : j + k + 1])
            _, hidden = drafter.forward_sequence(torch.cat(tokens, 1), torch.cat(features, 1))
            torch.testing.assert_close(
                hidden[:, -1], drafter.next_features(steps[k])[:, j], rtol=1e-4, atol=1e-4
            )


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_and_dense_ttt_attention_agree() -> None:
    torch.manual_seed(0)
    q = torch.randn(2, 4, 16, 16)
    keys = [torch.randn(2, 2, 16, 16) for _ in range(3)]
    values = [torch.randn(2, 2, 16, 16) for _ in range(3)]
    dense = _attention.ttt(q, keys, values, backend="dense")
    flex = _attention.ttt(q, keys, values, backend="flex")
    torch.testing.assert_close(flex, dense, rtol=1e-4, atol=1e-4)


def test_checkpoint_is_sglang_native_and_round_trips(
    drafter: Eagle3Drafter, tiny_target: LlamaForCausalLM, tmp_path: Path
) -> None:
    folder = tmp_path / "draft"
    drafter.config["dtype"] = "float32"
    save_drafter(drafter, folder, target_config=tiny_target.config.to_dict())
    tensors = load_file(folder / "model.safetensors")
    assert {name: tuple(t.shape) for name, t in tensors.items()} == SGLANG_KEYS
    assert tensors["d2t"].dtype == torch.int64
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    assert config["draft_vocab_size"] == 100
    assert config["vocab_size"] == 256
    assert config["rope_theta"] == 500000.0
    assert config["num_hidden_layers"] == 1
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]

    embed = tiny_target.get_input_embeddings().weight.detach()
    loaded = load_drafter(folder, target_embed=embed, device="cpu", dtype=torch.float32)
    ids, aux = torch.randint(0, 256, (1, 7)), torch.randn(1, 7, 96)
    torch.testing.assert_close(loaded.forward_sequence(ids, aux)[0], drafter.forward_sequence(ids, aux)[0])
    assert loaded.draft_to_target(torch.tensor([0, 5, 99])).tolist() == [0, 10, 198]
    assert loaded.t2d.sum() == 100
    assert bool(loaded.t2d[198])
    assert not bool(loaded.t2d[199])
    assert loaded.aux_layers == [2, 4, 5]


def test_load_accepts_sglang_spellings_and_refuses_missing_weights(
    drafter: Eagle3Drafter, tiny_target: LlamaForCausalLM, tmp_path: Path
) -> None:
    folder = tmp_path / "draft"
    save_drafter(drafter, folder, target_config=tiny_target.config.to_dict())
    tensors = load_file(folder / "model.safetensors")
    renamed = {name.replace("midlayer.", "layers.0."): t for name, t in tensors.items()}
    save_file({**renamed, "t2d": drafter.t2d}, folder / "model.safetensors")
    embed = tiny_target.get_input_embeddings().weight.detach()
    load_drafter(folder, target_embed=embed, device="cpu", dtype=torch.float32)

    del renamed["lm_head.weight"]
    save_file(renamed, folder / "model.safetensors")
    with pytest.raises(ValueError, match="lm_head.weight"):
        load_drafter(folder, target_embed=embed, device="cpu", dtype=torch.float32)


@torch.no_grad()
def test_aux_hidden_states_are_hf_hidden_states_at_the_chosen_indices(tiny_target: LlamaForCausalLM) -> None:
    ids = torch.randint(0, 256, (2, 9))
    reference = tiny_target(input_ids=ids, output_hidden_states=True).hidden_states
    aux = aux_hidden_states(tiny_target, ids)  # default [2, N//2, N-3] = [2, 4, 5] for 8 layers
    expected = torch.cat([reference[2], reference[4], reference[5]], dim=-1)
    torch.testing.assert_close(aux, expected)
    explicit = aux_hidden_states(tiny_target, ids, aux_layers=[1, 3, 7])
    torch.testing.assert_close(explicit, torch.cat([reference[1], reference[3], reference[7]], dim=-1))


def test_aux_layers_that_sglang_cannot_capture_are_refused(tiny_target: LlamaForCausalLM) -> None:
    config = tiny_target.config.to_dict()
    for bad in ([0, 2, 4], [2, 4, 8], [2, 2, 5], [2, 4]):
        with pytest.raises(ValueError, match="aux_layers"):
            Eagle3Drafter.from_target_config(config, draft_vocab_size=100, aux_layer_ids=bad)


def test_a_full_vocabulary_draft_without_d2t_loads_as_the_identity(
    tiny_target: LlamaForCausalLM, tmp_path: Path
) -> None:
    # speculators' save_pretrained writes no d2t when the draft vocabulary is the target's; SGLang serves
    # such a draft (seen on the H200, bench/results/h200_draft-dtype-smoke_eyas-0.1.0_sglang-0.5.14.json),
    # so the reference engine must too.
    config = tiny_target.config.to_dict()
    full = Eagle3Drafter.from_target_config(config, draft_vocab_size=256, aux_layer_ids=[2, 4, 5])
    folder = tmp_path / "full"
    save_drafter(full, folder, target_config=config)
    tensors = load_file(folder / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if k != "d2t"}, folder / "model.safetensors")
    embed = tiny_target.get_input_embeddings().weight.detach()
    loaded = load_drafter(folder, target_embed=embed, device="cpu", dtype=torch.float32)
    assert loaded.draft_to_target(torch.tensor([0, 17, 255])).tolist() == [0, 17, 255]

    small = Eagle3Drafter.from_target_config(config, draft_vocab_size=100, aux_layer_ids=[2, 4, 5])
    save_drafter(small, folder, target_config=config)
    tensors = load_file(folder / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if k != "d2t"}, folder / "model.safetensors")
    with pytest.raises(ValueError, match="d2t"):  # a reduced vocabulary without its map stays refused
        load_drafter(folder, target_embed=embed, device="cpu", dtype=torch.float32)
