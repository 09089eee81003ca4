"""What a newcomer reads first, in headless Chromium: a CPU demo's sweep (one depth, slower than plain
decoding, no speedup required) is not called deployable; a job or pipeline that does not exist is not an
outage; a stopped server is not "up"; each host says which roots job paths must lie under."""

from __future__ import annotations

import re
import uuid

from playwright.sync_api import expect

from app.core.config import Settings
from tests.dashboard import data
from tests.dashboard.conftest import Dashboard


def test_a_sweep_that_required_no_speedup_is_not_called_deployable(
    dashboard: Dashboard, settings: Settings
) -> None:
    sweep = data.cpu_demo_sweep()
    chain = sweep["rows"][1]
    assert chain["speedup_ci_high"] < 1, "the demo's engine is slower than plain decoding"
    job = data.make_job(settings, "benchmark", "succeeded", progress=1.0, result=sweep)
    data.record_benchmark(settings, job, sweep)
    data.add_log(settings, job, [sweep["gate"]["verdict"]])
    page = dashboard.page
    dashboard.open(f"#/jobs/{job}")
    verdict = page.locator("#verdict")
    expect(verdict.locator(".badge")).to_have_text("no speedup required")
    assert "state-succeeded" not in (verdict.locator(".badge").get_attribute("class") or ""), "never green"
    assert "deployable" not in verdict.inner_text()
    expect(verdict).to_contain_text("asked for no speedup (threshold 0)")
    low, high = f"{chain['speedup_ci_low']:.2f}", f"{chain['speedup_ci_high']:.2f}"
    expect(verdict).to_contain_text(
        f"It measured 0.64× (95 % interval {low}–{high}): slower than without speculation."
    )
    # one depth: figures, not a line through one point
    assert page.locator("#benchmark .uplot").count() == 0
    card = page.locator("#benchmark-figures .figure-card")
    expect(card).to_have_count(1)
    assert card.get_attribute("data-config") == "3,1,4"
    values = card.locator(".figure-value").all_inner_texts()
    assert values == ["1.13", "0.64×"]
    expect(card).to_contain_text("slower than the baseline")
    bars = card.locator(".figure-bar-fill").evaluate_all(
        "bars => bars.map((b) => b.getBoundingClientRect().width)"
    )
    assert 0 < bars[0] < bars[1], "the speculative bar is shorter than the baseline's"
    assert card.locator(".figure-bar-value").all_inner_texts() == [
        f"{chain['output_tok_s']} tok/s",
        "21.4 tok/s",
    ]
    chosen = page.locator("#benchmark-table .row-chosen td")
    assert chosen.nth(3).inner_text() == f"0.64× [{low}–{high}]", "the interval is never below zero"
    dashboard.screenshot("job-benchmark-cpu")

    dashboard.open("#/servers")
    row = page.locator("#benchmarks-table tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator(".badge")).to_have_text("no speedup required")
    assert f"0.64× [{low}–{high}]" in row.inner_text()
    assert dashboard.errors == []


def test_a_job_or_pipeline_that_does_not_exist_is_not_an_outage(dashboard: Dashboard) -> None:
    page = dashboard.page
    missing = uuid.uuid4()
    dashboard.open(f"#/jobs/{missing}")
    expect(page.locator("#job-head .notice-error")).to_contain_text(f"No job {missing}: it does not exist")
    expect(page.locator("#live")).to_have_class("live live-ok")  # the API answered: it is not offline
    assert page.locator("#log-panel").is_hidden()

    dashboard.open(f"#/pipelines/{missing}")
    expect(page.locator(".job-head .notice-error")).to_contain_text(
        f"No pipeline {missing}: it does not exist"
    )
    expect(page.locator("#live")).to_have_class("live live-ok")
    # a 404 is the browser's console error for each: nothing else went wrong
    assert [e for e in dashboard.errors if "404" not in e] == []


def test_a_stopped_server_is_not_up_since_anything(dashboard: Dashboard, settings: Settings) -> None:
    launch = data.make_job(settings, "launch", "running", minutes_ago=25)
    ready = data.record_server(
        settings, launch, "gpu-h200", state="ready", engine="sglang", url="http://10.0.0.7:30000", gpus=[0]
    )
    ended = data.make_job(settings, "launch", "cancelled", minutes_ago=300)
    stopped = data.record_server(settings, ended, "gpu-h200", state="starting", engine="sglang")
    data.record_server(settings, ended, "gpu-h200", state="stopped", engine="sglang")
    page = dashboard.page
    dashboard.open("#/servers")
    expect(page.locator("#servers-table tbody tr")).to_have_count(2)
    heads = page.locator("#servers-table thead th").all_inner_texts()
    since = heads.index("since")
    live = page.locator(f"tr[data-server-id='{ready}'] td").nth(since)
    expect(live).to_have_text(re.compile(r"^up \d+s$"))
    gone = page.locator(f"tr[data-server-id='{stopped}'] td").nth(since)
    expect(gone).to_have_text(re.compile(r"^stopped \d+s ago$"))
    assert "up" not in gone.inner_text()
    assert dashboard.errors == []


def test_each_host_shows_the_roots_job_paths_must_lie_under(dashboard: Dashboard, settings: Settings) -> None:
    data.report_gpu_host(settings, "gpu-h200", [data.h200(0, 615.0, 0.0, [])], ("/data", "/models"))
    data.report_gpu_host(settings, "bare", [], ())
    page = dashboard.page
    dashboard.open("#/hosts")
    roots = page.locator("[data-host=gpu-h200] .roots")
    expect(roots).to_contain_text("job paths must lie under one of them")
    assert roots.locator(".root").all_inner_texts() == ["/data", "/models"]
    expect(page.locator("[data-host=bare] .notice-warn").first).to_contain_text(
        "No allowed roots: every job that names a path is refused here"
    )
    assert dashboard.errors == []
