"""chat_source.raw_text_note: raw-text prompts sent to a target whose tokenizer has a chat template are
flagged (a chat-trained drafter reads them as text it never saw: the demo's drafter accepted 1.55 at depth 3
on raw text, 4.00 on the same words as chat turns); token-id prompts and template-less targets are not.
Real tokenizer folders, the demo's."""

from __future__ import annotations

from pathlib import Path

from cli.demo.constructed import build_tokenizer
from drafting.serving.prompts import Prompt
from drafting.serving.prompts.chat_source import raw_text_note


def _tokenizer_folder(root: Path, *, template: bool) -> Path:
    tokenizer = build_tokenizer()
    if not template:
        tokenizer.chat_template = None
    tokenizer.save_pretrained(root)
    return root


def test_raw_text_to_a_chat_target_is_flagged_with_the_count(tmp_path: Path) -> None:
    folder = _tokenizer_folder(tmp_path, template=True)
    prompts = [Prompt(text="w1 w2"), Prompt(text="w3"), Prompt(input_ids=[5, 6])]
    note = raw_text_note(prompts, folder)
    assert note is not None
    assert note.startswith("2 of 3 prompts are raw text, sent without the target's chat template")
    assert '{"messages": [...]}' in note


def test_ids_prompts_template_less_targets_and_unknown_tokenizers_are_not_flagged(tmp_path: Path) -> None:
    chat_target = _tokenizer_folder(tmp_path / "chat", template=True)
    plain_target = _tokenizer_folder(tmp_path / "plain", template=False)
    assert raw_text_note([Prompt(input_ids=[5, 6])], chat_target) is None
    assert raw_text_note([Prompt(text="w1")], plain_target) is None
    assert raw_text_note([Prompt(text="w1")], None) is None  # a server that did not say what it loaded
    assert raw_text_note([Prompt(text="w1")], tmp_path / "empty") is None
