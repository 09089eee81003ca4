"""Benchmarks a user runs on their own machines, each a module with `--help` that prints JSON:

    python -m bench.<name> --help        # from the repository root

The control plane on a CPU (dispatch, status, logs, load, fix_keys, client, sweep_cpu), the library's heavy
steps against their yardsticks (extract, train_step, train_yardstick, train_stage), and on a GPU host with
eyas and SGLang installed the real-model journey through eyas's API (journey, journey_constructed), trainers
and recipes side by side (speculators_side_by_side, specforge_side_by_side, recipes), eyas eval of a draft
(draft_eval) and eyas's generate client beside a direct one (generate_direct). docs/benchmarks.md records
each figure with the command that gives it. Modules starting with `_` are shared helpers, not benchmarks.
"""
