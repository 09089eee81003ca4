"""Summary statistics of a benchmark run (SGLang's definitions where it has them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drafting.serving.benchmark.load_client import RequestRecord


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _ms(value: float | None) -> float | None:
    return round(value * 1000, 3) if value is not None else None


def summarize(records: Sequence[RequestRecord], wall_s: float) -> dict[str, Any]:
    """Acceptance length = Σ completion_tokens / Σ spec_verify_ct (None without speculation)."""
    done = [r for r in records if r.error is None]
    completion = sum(r.completion_tokens for r in done)
    verified = [r for r in done if r.spec_verify_ct]
    verify_ct = sum(r.spec_verify_ct or 0 for r in verified)
    accept_len = sum(r.completion_tokens for r in verified) / verify_ct if verify_ct else None
    streamed = bool(done) and all(r.streamed for r in done)
    ttft = [r.ttft_s for r in done if r.ttft_s is not None]
    itl = [gap for r in done for gap in r.itl_s]
    e2e = [r.e2e_s for r in done]
    return {
        "requests": len(records),
        "failed_requests": len(records) - len(done),
        "completion_tokens": completion,
        "spec_verify_ct": verify_ct or None,
        "accept_len": round(accept_len, 4) if accept_len is not None else None,
        "duration_s": round(wall_s, 4),
        "output_tok_s": round(completion / wall_s, 3) if wall_s > 0 else None,
        "request_throughput": round(len(done) / wall_s, 4) if wall_s > 0 else None,
        "timing": "stream" if streamed else "e2e",
        "ttft_p50_ms": _ms(percentile(ttft, 50)),
        "ttft_p99_ms": _ms(percentile(ttft, 99)),
        "itl_p50_ms": _ms(percentile(itl, 50)),
        "itl_p99_ms": _ms(percentile(itl, 99)),
        "e2e_p50_ms": _ms(percentile(e2e, 50)),
        "e2e_p99_ms": _ms(percentile(e2e, 99)),
    }
