"""Regenerating a prompt set's answers with the target itself (the `generate` stage's library).

template: the chat template's end-of-turn token and user-turn prefix; inputs: the prompt set as conversations
to answer, or why a record cannot be used; client: one /generate request (SGLang's native API); runner: the
concurrent loop that answers them turn by turn; self_prompts: Magpie-style user turns and their filter;
output: the append-only conversations file and what a resumed run finds in it; tally: the run's counts.
"""
