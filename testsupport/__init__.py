"""What the tests and the benchmarks both build: tiny and GPU-sized random targets (target_zoo: one per
architecture users serve), drafters fitted to them, a tiny trainer, conversations for them, and waiting with
a deadline or a hand-moved clock (timing). Imported by `tests/` and `bench/`, never by the product; it
imports the product (drafting, contract) and never `tests/` or `bench/` (tests/test_layering.py)."""
