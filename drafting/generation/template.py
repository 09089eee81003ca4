"""What `generate` needs from the target's chat template: its end-of-turn token and its user-turn prefix.

Both are found by rendering probe conversations, not by knowing template names, so any chat template works:
- the end-of-turn token is the first token the template writes after an assistant's content (ChatML
  `<|im_end|>`, Llama 3 `<|eot_id|>`). It is sent as a stop token, so an answer ends where the template ends
  a turn even when the model's configured EOS is another token, and a finish at it counts as complete;
- the user-turn prefix is the text the template writes before a first user message's content (ChatML
  `<|im_start|>user\\n`, with a default system turn first when the template adds one): Magpie samples from it.

Prompts are tokenized here, not by the server, with add_special_tokens=False: the rendered template already
holds its BOS where the template wants one (a server tokenizing `text` would add a second one to some).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drafting.prompting.chat import has_chat_template, render_messages
from drafting.prompting.records import Message, RecordError
from drafting.userfiles import check_model_folder

_PROBE_USER = "eyas-probe-question-7f3a"
_PROBE_ANSWER = "eyas-probe-answer-7f3a"


class TemplateProblem(ValueError):
    """The target's tokenizer cannot drive `generate` (no chat template, or one eyas cannot probe)."""


@dataclass(frozen=True)
class TemplateFacts:
    stop_ids: frozenset[int]  # the special token that ends an assistant turn (empty: the model's EOS only)
    user_stop_ids: frozenset[int]  # the one that ends a user turn (ChatML: the same; Mistral: [/INST])
    user_prefix: str | None  # text before a first user turn's content; None when the probe fails


def load_chat_tokenizer(folder: str, *, trust_remote_code: bool = False) -> Any:
    """The target's tokenizer; TemplateProblem when it has no chat template (generate renders every turn)."""
    from drafting.ml.text_model import load_tokenizer

    check_model_folder(folder, "target folder")
    tokenizer = load_tokenizer(folder, trust_remote_code=trust_remote_code)
    if not has_chat_template(tokenizer):
        raise TemplateProblem(
            f"the tokenizer in {folder} has no chat template: generate renders every turn with it "
            "(add chat_template to tokenizer_config.json)"
        )
    return tokenizer


def template_facts(tokenizer: Any) -> TemplateFacts:
    return TemplateFacts(
        stop_ids=_first_special_after(tokenizer, _PROBE_ANSWER),
        user_stop_ids=_first_special_after(tokenizer, _PROBE_USER),
        user_prefix=_user_prefix(tokenizer),
    )


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _first_special_after(tokenizer: Any, content: str) -> frozenset[int]:
    """The token the template writes right after `content` in a probe chat, when it is a special token (a
    plain-text closing such as "\n\n" would stop answers mid-way)."""
    messages: list[Message] = [
        {"role": "user", "content": _PROBE_USER},
        {"role": "assistant", "content": _PROBE_ANSWER},
    ]
    try:
        text = render_messages(tokenizer, messages, generation_prompt=False)
    except RecordError:
        return frozenset()
    _, found, after = text.partition(content)
    closing = encode(tokenizer, after) if found else []
    return frozenset(closing[:1]) & _special_ids(tokenizer)


def _user_prefix(tokenizer: Any) -> str | None:
    try:
        text = render_messages(tokenizer, [{"role": "user", "content": _PROBE_USER}], generation_prompt=False)
    except RecordError:
        return None
    prefix, found, _ = text.partition(_PROBE_USER)
    return prefix if found and prefix else None


def _special_ids(tokenizer: Any) -> frozenset[int]:
    ids = {int(i) for i in getattr(tokenizer, "all_special_ids", [])}
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    ids |= {int(i) for i, token in decoder.items() if getattr(token, "special", False)}
    return frozenset(ids)
