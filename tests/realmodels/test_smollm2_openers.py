"""Self-written user turns after an opener, on the real target's tokenizer: the turn is the opener and the
target's tokens decoded together, as the target saw them."""

from __future__ import annotations

from transformers import AutoTokenizer

from drafting.generation.client import Completion
from drafting.generation.runner import user_turn
from drafting.generation.template import encode, template_facts
from tests.realmodels.targets import realmodel, smollm2_target

pytestmark = realmodel


def test_an_openers_turn_is_decoded_with_the_targets_own_tokens() -> None:
    tokenizer = AutoTokenizer.from_pretrained(smollm2_target())
    prefix_text = template_facts(tokenizer).user_prefix
    assert prefix_text is not None
    opener = "Write a Python function that"
    prefix, sent = encode(tokenizer, prefix_text), encode(tokenizer, prefix_text + opener)
    assert sent[: len(prefix)] == prefix  # the opener's tokens follow the prefix's unchanged
    written = encode(tokenizer, " reverses a string.") + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    asked = Completion("reverses a string.", "stop", len(written), len(sent), output_ids=tuple(written))
    turn = user_turn(tokenizer, opener, sent[len(prefix) :], asked)
    assert turn == "Write a Python function that reverses a string."  # one space, no end-of-turn text
    # a server that sent no ids: the opener and its text, a space before a word
    bare = Completion("reverses a string.", "stop", len(written), len(sent))
    assert user_turn(tokenizer, opener, sent[len(prefix) :], bare) == turn
    punctuated = Completion("'s favourite?", "stop", 3, len(sent))
    assert user_turn(tokenizer, "What is the cat", None, punctuated) == "What is the cat's favourite?"
