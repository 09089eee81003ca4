"""What the tests and the benchmarks both build: tiny and GPU-sized random targets, drafters fitted to them,
and conversations for them. Imported by `tests/` and `bench/`, never by the product; it imports the product
(drafting, contract) and never `tests/` or `bench/` (tests/test_layering.py)."""
