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


def test_a_training_runs_metrics_read_at_a_glance(dashboard: Dashboard, settings: Settings) -> None:
    """A run with a split and a held-out set reports ~140 series (7 TTT positions × loss, acc, full_acc,
    cond_acc × 4 splits, accept lengths by depth…): the page shows a few headline figures, four charts
    whose keys stay one line or two, and every newest value in one folded table."""
    job = data.make_job(settings, "train", "running", progress=0.4, progress_message="epoch 3/3 · step 115")
    rows = data.trainer_metrics()
    data.add_metrics(settings, job, rows)
    data.add_log(settings, job, [f"step {s} loss {2.0 - s / 100:.3f}" for s in range(0, 120, 10)])
    names = {name for name, _, _ in rows}
    page = dashboard.page
    dashboard.open(f"#/jobs/{job}")
    expect(page.locator("#charts .uplot")).to_have_count(6)
    titles = page.locator("#charts .u-title").all_inner_texts()
    assert titles == [
        "Loss",
        "Accuracy by TTT position",
        "Accept length by depth (simulated serving, else estimated)",
        "train/grad_norm",
        "train/lr",
        "train/tokens_per_s",
    ]
    loss_legend = page.locator("#charts .uplot").nth(0).locator(".u-legend .u-label").all_inner_texts()
    assert loss_legend == ["step", "held_out/loss", "train/loss", "val/loss"], "the objective, not loss_k"
    # accuracy: acc_k only (not full_acc/cond_acc, not the epoch repeats), 7 positions × 3 splits, one key
    accuracy = page.locator("#charts .chart").nth(1)
    assert accuracy.locator(".u-legend").count() == 0 or not accuracy.locator(".u-legend").is_visible()
    keys = accuracy.locator(".chart-key-item").evaluate_all(
        "items => items.map((i) => i.dataset.key || i.dataset.split)"
    )
    assert keys == [f"acc_{k}" for k in range(7)] + ["train", "val", "held_out"]
    series = page.locator("#charts .chart").evaluate_all(
        "charts => charts.map((c) => Number(c.dataset.series))"
    )
    assert series[:3] == [3, 7 * 3, 1 + 3 * 2], series
    key_height = accuracy.locator(".chart-key").bounding_box()["height"]
    plot_height = accuracy.locator(".uplot").bounding_box()["height"]
    assert key_height < 0.25 * plot_height, f"the key ({key_height}px) outgrows the plot ({plot_height}px)"
    accept = page.locator("#charts .chart").nth(2).locator(".chart-key-item")
    accept_keys = accept.evaluate_all("items => items.map((i) => i.dataset.key || i.dataset.split)")
    assert accept_keys == [
        "est_accept_len",
        "sim_accept_len_d3",
        "sim_accept_len_d5",
        "sim_accept_len_d7",
        "train",
        "val",
        "held_out",
    ], "simulated where validation measured it; training's running estimate beside it"
    drawn = page.evaluate(COUNT_SERIES_PIXELS, list(FIRST_SERIES_RGB))
    assert min(drawn) > 50, f"a chart has no line drawn: {drawn}"
    chips = page.locator("#metric-latest .metric-chip b").all_inner_texts()
    assert chips == [
        "train/loss",
        "val/loss",
        "held_out/loss",
        "held_out/sim_accept_len_d3",
        "held_out/sim_accept_len_d5",
        "held_out/sim_accept_len_d7",
        "val/sim_accept_len_d3",
        "val/sim_accept_len_d5",
        "val/sim_accept_len_d7",
        "train/est_accept_len",
        "epoch",
        "train/lr",
        "train/tokens_per_s",
    ]
    # the figures and charts at a glance, below the sticky top bar
    page.evaluate(
        "scrollTo(0, document.getElementById('metrics').getBoundingClientRect().top + scrollY - 54)"
    )
    dashboard.screenshot("job-train")
    table = page.locator("#metric-table")
    expect(table.locator("summary")).to_have_text(f"All {len(names)} metrics: newest values by split")
    table.locator("summary").click()
    heads = table.locator("thead th").all_inner_texts()
    assert heads == ["metric", "run", "train", "train_epoch", "val", "held_out"]
    keys_in_table = table.locator("tbody tr td:first-child").all_inner_texts()
    assert keys_in_table[:3] == ["acc_0", "acc_1", "acc_2"]
    assert len(keys_in_table) == len({name.split("/")[-1] for name in names})

    data.add_metrics(settings, job, [("train/loss", 200, 0.4321), ("val/loss", 200, 0.5432)])
    chip = page.locator("#metric-latest .metric-chip", has_text="train/loss")
    expect(chip).to_contain_text("0.4321")
    expect(page.locator("#metric-latest .metric-chip", has_text="val/loss")).to_contain_text("0.5432")
    assert table.get_attribute("open") is not None, "the table stays open across refreshes"
    assert dashboard.errors == []
