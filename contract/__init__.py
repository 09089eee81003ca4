"""What the API and the workers share, and nothing else: stage params, termination reasons, stage events, the
stage registry. Pure pydantic and the standard library (tests/test_layering.py keeps it so)."""
