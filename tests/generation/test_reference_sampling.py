"""The reference engine's sampling: reproducible per seed, top_p near 0 is greedy, it stops at a stop token,
and /generate's sampling_params are checked as SGLang checks them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from drafting.serving.engine._reference_http import BadRequest, _sampling
from drafting.serving.engine._reference_sampling import Sampling, sample_decode
from drafting.serving.engine.decoding import DecodeLimits, greedy_decode
from drafting.serving.engine.models import load_models
from drafting.serving.engine.reference_engine import EngineOptions, ReferenceEngine, stop_token_ids
from tests.generation.targets import END_ID


@pytest.fixture(scope="module")
def model_and_prompt(chatty: Path) -> tuple[torch.nn.Module, list[int]]:
    model = AutoModelForCausalLM.from_pretrained(chatty).eval()
    tokenizer = AutoTokenizer.from_pretrained(chatty)
    prompt = tokenizer("<s><|user|> w3 w4 <|end|> <|assistant|> ", add_special_tokens=False)["input_ids"]
    return model, prompt


def test_a_seed_reproduces_a_sample_and_another_seed_differs(
    model_and_prompt: tuple[torch.nn.Module, list[int]],
) -> None:
    model, prompt = model_and_prompt
    limits = DecodeLimits(24)  # no stop token: the end-of-turn token is sampled like any other
    runs = [
        sample_decode(model, prompt, limits, Sampling(1.0, seed=seed)).output_ids for seed in (7, 7, 8, 9)
    ]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2] or runs[0] != runs[3]
    assert END_ID in {token for run in runs for token in run}  # p = 0.3 after each word


def test_top_p_near_zero_is_greedy_and_a_stop_token_ends_the_answer(
    model_and_prompt: tuple[torch.nn.Module, list[int]],
) -> None:
    model, prompt = model_and_prompt
    greedy = greedy_decode(model, prompt, DecodeLimits(10)).output_ids
    assert (
        sample_decode(model, prompt, DecodeLimits(10), Sampling(1.0, top_p=1e-6, seed=1)).output_ids == greedy
    )
    stopped = sample_decode(model, prompt, DecodeLimits(50, frozenset({END_ID})), Sampling(1.0, seed=3))
    assert stopped.finish_reason == "stop"
    assert stopped.output_ids[-1] == END_ID
    assert END_ID not in stopped.output_ids[:-1]


def test_the_engine_stops_at_every_eos_sglang_gathers(chatty: Path) -> None:
    models = load_models(str(chatty), None, device=torch.device("cpu"), dtype=torch.float32)
    # config.json's eos (LlamaConfig's default 2, `<s>`) and the tokenizer's `<|end|>`
    assert stop_token_ids(models) == frozenset({2, END_ID})


@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        ({"temperature": -1}, "temperature"),
        ({"temperature": "hot"}, "temperature must be a number"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"sampling_seed": True}, "sampling_seed"),
        ({"sampling_seed": -1}, "sampling_seed"),
    ],
)
def test_bad_sampling_params_are_a_400(chatty: Path, sampling: dict[str, object], message: str) -> None:
    engine = ReferenceEngine(EngineOptions(model=str(chatty)))
    with pytest.raises(BadRequest, match=message):
        _sampling(engine, sampling)


def test_sampling_settings_as_sglang_reads_them(chatty: Path) -> None:
    plain = ReferenceEngine(EngineOptions(model=str(chatty)))
    assert _sampling(plain, {"temperature": 0}) is None
    assert _sampling(plain, {"temperature": 0.8, "top_k": 1}) is None  # top_k 1 is greedy
    assert _sampling(plain, {}) == Sampling(1.0)  # SGLang's default temperature is 1
    assert _sampling(plain, {"temperature": 0.5, "top_p": 0.9, "sampling_seed": 4}) == Sampling(
        0.5, 0.9, -1, 4
    )
    speculative = ReferenceEngine(EngineOptions(model=str(chatty), draft="/nowhere"))
    with pytest.raises(BadRequest, match="greedily only"):
        _sampling(speculative, {"temperature": 0.7})
