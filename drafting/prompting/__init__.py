"""Prompt and conversation records in the formats users bring, and their rendering through a chat template.

One reader for `generate`, `eval` and `benchmark`, so a prompt means the same thing in all three:

    {"messages": [{"role": "user", "content": ...}, ...]}            OpenAI chat
    {"conversations": [{"from": "human", "value": ...}, ...]}        ShareGPT
    {"turns": ["first question", "follow-up"], "category": ...}      MT-Bench (question_id kept as id)
    {"text": "..."}                                                  plain text

A chat record is rendered with the target's chat template (generation prompt appended); a plain `text`
record is sent as it is (raw completion) in eval and benchmark, and is one user turn in `generate`.
"""
