"""The job page in headless Chromium: a running job's log grows on screen, metrics are plotted and follow."""

from __future__ import annotations

import time
from typing import Any

import httpx
from playwright.sync_api import expect

from app.core.config import Settings
from tests.dashboard import data
from tests.dashboard.conftest import Dashboard

# The first series' stroke (charts.js PALETTE[0]); its pixels on a canvas mean a line was drawn.
FIRST_SERIES_RGB = (0x2F, 0x6F, 0xDB)
COUNT_SERIES_PIXELS = """([r, g, b]) => [...document.querySelectorAll('#charts canvas')].map((canvas) => {
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let hits = 0;
  for (let i = 0; i < pixels.length; i += 4) {
    if (Math.abs(pixels[i] - r) < 12 && Math.abs(pixels[i + 1] - g) < 12 && Math.abs(pixels[i + 2] - b) < 12
        && pixels[i + 3] > 200) hits += 1;
  }
  return hits;
})"""


def line_count(page: Any) -> int:
    return int(page.locator("#log .log-line").count())


def test_a_running_jobs_log_grows_on_screen(
    dashboard: Dashboard, admin: dict[str, str], start_worker: object
) -> None:
    start_worker("gpu-a")  # type: ignore[operator]
    body = {"kind": "selftest", "host": "gpu-a", "params": {"lines": 40, "lines_per_second": 10}}
    job = httpx.post(f"{dashboard.url}/v1/jobs", json=body, headers=admin).json()["id"]
    page = dashboard.page
    dashboard.open(f"#/jobs/{job}")
    expect(page.locator("#log-status")).to_have_text("following live")

    counts: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "complete" not in dashboard.text("#log-status"):
        counts.append(line_count(page))
        if len(counts) >= 2 and counts[-2] < 20 <= counts[-1]:
            dashboard.screenshot("job-log")  # mid-run: half the lines are on screen
        time.sleep(0.25)
    expect(page.locator("#log-status")).to_contain_text("log complete · job succeeded")

    growth = sorted(set(counts))
    assert len(growth) >= 6, f"the log did not grow in steps while the job ran: {counts}"
    assert counts == sorted(counts), "lines never disappear"
    stage_lines = [t for t in page.locator("#log .log-text").all_inner_texts() if not t.startswith("[eyas]")]
    assert stage_lines == [f"line {i}" for i in range(40)]
    # Auto-scroll: the reader who stayed at the bottom sees the newest line.
    gap = page.evaluate(
        "(() => { const b = document.getElementById('log'); "
        "return b.scrollHeight - b.scrollTop - b.clientHeight; })()"
    )
    assert page.evaluate(
        "document.getElementById('log').scrollHeight > document.getElementById('log').clientHeight"
    )
    assert gap < 24
    expect(page.locator("#job-head .badge")).to_have_text("succeeded")
    assert dashboard.errors == []


def test_training_metrics_are_plotted_and_follow_new_steps(dashboard: Dashboard, settings: Settings) -> None:
    job = data.make_job(settings, "train", "running", progress=0.4, progress_message="epoch 1/3 · step 120")
    data.add_metrics(settings, job, data.training_curves(range(0, 120)))
    data.add_log(settings, job, [f"step {s} loss {2.0 - s / 100:.3f}" for s in range(0, 120, 10)])
    page = dashboard.page
    dashboard.open(f"#/jobs/{job}")
    expect(page.locator("#charts .uplot")).to_have_count(5)
    titles = page.locator("#charts .u-title").all_inner_texts()
    assert titles == ["Loss", "Accuracy by TTT position", "est_accept_len", "lr", "tokens_per_s"]
    loss_legend = page.locator("#charts .uplot").nth(0).locator(".u-legend .u-label").all_inner_texts()
    assert loss_legend == ["step", "train/loss", "val/loss"]
    acc_legend = page.locator("#charts .uplot").nth(1).locator(".u-legend .u-label").all_inner_texts()
    assert acc_legend[1:] == [f"{split}/acc_{k}" for split in ("train", "val") for k in range(3)]
    # every acceptance estimate on one chart: the running one, the split's and the held-out set's by depth
    estimates = page.locator("#charts .uplot").nth(2).locator(".u-legend .u-label").all_inner_texts()
    assert set(estimates[1:]) == {"est_accept_len", "val/est_accept_len_d5", "held_out/est_accept_len_d5"}
    drawn = page.evaluate(COUNT_SERIES_PIXELS, list(FIRST_SERIES_RGB))
    assert min(drawn) > 50, f"a chart has no line drawn: {drawn}"
    dashboard.screenshot("job-train")

    data.add_metrics(settings, job, [("train/loss", 120, 0.4321), ("val/loss", 120, 0.5432)])
    chip = page.locator("#metric-latest .metric-chip", has_text="train/loss")
    expect(chip).to_contain_text("0.4321")
    expect(page.locator("#metric-latest .metric-chip", has_text="val/loss")).to_contain_text("0.5432")
    assert dashboard.errors == []
