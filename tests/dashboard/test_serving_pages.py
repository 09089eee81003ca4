"""Servers, benchmarks and pipelines in headless Chromium, from rows written through the app's services."""

from __future__ import annotations

import uuid

import httpx
from playwright.sync_api import expect
from sqlalchemy import select

from app.core.config import Settings
from app.core.db import session_scope
from app.models.benchmark import BenchmarkResult
from contract.params.benchmark import SpecConfig
from drafting.serving.benchmark.sweep_report import rejected_row
from tests.app.test_benchmark_compare import sweep as compare_sweep
from tests.dashboard import data
from tests.dashboard.conftest import Dashboard

DRAFT = "/data/drafts/llama-3.1-8b-eagle3/sglang_draft"


def test_servers_are_listed_and_stopped_from_the_page(
    dashboard: Dashboard, settings: Settings, admin: dict[str, str]
) -> None:
    launch = data.make_job(settings, "launch", "running", gpu_indices=[0, 1], minutes_ago=25)
    ready = data.record_server(
        settings, launch, "gpu-h200", state="ready", engine="sglang", url="http://10.0.0.7:30000",
        gpus=[0, 1], draft=DRAFT, accept_len=3.42, pid=31337,
    )  # fmt: skip
    old_launch = data.make_job(settings, "launch", "cancelled", minutes_ago=300)
    data.record_server(
        settings, old_launch, "gpu-h200", state="stopped", engine="sglang", url="http://10.0.0.7:30001"
    )
    bench = data.make_job(settings, "benchmark", "succeeded", result=data.sweep_result(), minutes_ago=20)
    data.record_benchmark(settings, bench, data.sweep_result())

    page = dashboard.page
    page.on("dialog", lambda dialog: dialog.accept())
    dashboard.open("#/servers")
    row = page.locator(f"tr[data-server-id='{ready}']")
    expect(row).to_contain_text("http://10.0.0.7:30000")
    assert page.locator("#servers-table tbody tr").count() == 2
    assert "3.42" in row.inner_text()
    assert (
        page.locator("#servers-table button[data-stop]").count() == 1
    )  # only the live server can be stopped
    bench_row = page.locator("#benchmarks-table tbody tr")
    expect(bench_row).to_have_count(1)
    assert "deployable" in bench_row.inner_text()
    assert "2.37×" in bench_row.inner_text()  # the chosen depth 10: 431 / 182 tok/s
    assert "10,1,11" in bench_row.inner_text()  # named by its config (a tree may share its depth)
    dashboard.screenshot("servers")

    row.locator("button[data-stop]").click()
    expect(row.locator(".badge")).to_have_text("stopping")
    server = httpx.get(f"{dashboard.url}/v1/servers/{ready}", headers=admin).json()
    assert server["state"] == "stopping"
    assert httpx.get(f"{dashboard.url}/v1/jobs/{launch}", headers=admin).json()["state"] == "cancelling"
    assert dashboard.errors == []


def test_a_benchmark_job_plots_acceptance_and_speed_by_depth(
    dashboard: Dashboard, settings: Settings
) -> None:
    job = data.make_job(settings, "benchmark", "succeeded", progress=1.0, result=data.sweep_result())
    data.add_log(settings, job, [f"{row['label']}: {row['output_tok_s']} tok/s" for row in data.sweep_rows()])
    page = dashboard.page
    dashboard.open(f"#/jobs/{job}")
    expect(page.locator("#benchmark .uplot")).to_have_count(2)
    titles = page.locator("#benchmark .u-title").all_inner_texts()
    assert titles == ["Acceptance length by depth", "Output tokens/s by depth"]
    speed_legend = page.locator("#benchmark .uplot").nth(1).locator(".u-legend .u-label").all_inner_texts()
    assert speed_legend == ["depth", "output tok/s", "baseline"]
    rows = page.locator("#benchmark-table tbody tr")
    labels = [rows.nth(i).locator("td").first.inner_text() for i in range(rows.count())]
    assert labels == ["baseline", "5,1,6", "5,2,8", "10,1,11", "16,1,17"], (
        "a tree is named apart from its chain"
    )
    chosen = page.locator("#benchmark-table .row-chosen td")
    assert chosen.first.inner_text() == "10,1,11"
    assert chosen.nth(3).inner_text() == "2.37× [2.25–2.49]"  # 431 / 182 tok/s, with its 95 % interval
    chain = rows.nth(1).locator("td")
    assert (chain.nth(6).inner_text(), chain.nth(7).inner_text()) == (
        "no real loss",
        "2 near-tie · 0 loss · 0 unscored",
    )
    expect(page.locator("#verdict")).to_contain_text("deployable")
    expect(page.locator("#verdict")).to_contain_text("chosen config 10,1,11")
    dashboard.screenshot("job-benchmark")

    failed = data.make_job(settings, "benchmark", "failed", termination_reason="RELEASE_GATE_FAILED",
                           result=data.sweep_result(deployable=False))  # fmt: skip
    dashboard.open(f"#/jobs/{failed}")
    expect(page.locator("#verdict")).to_contain_text("not deployable")
    expect(page.locator("#verdict .reasons")).to_contain_text("16,1,17: 1 real loss(es)")
    lossy = page.locator("#benchmark-table tbody tr").nth(4).locator("td")
    assert (lossy.nth(6).inner_text(), lossy.nth(7).inner_text()) == (
        "REAL LOSS",
        "0 near-tie · 1 loss · 0 unscored",
    )
    assert "request 3 token 17: real_loss" in (lossy.nth(7).get_attribute("title") or "")

    # a config its smoke test refused: a row with nothing measured, named as refused, the others still shown
    smoke = {
        "verdict": "outputs_diverged",
        "message": "1 output(s) diverge from the baseline beyond a near-tie",
    }
    refused = {**data.sweep_result(deployable=False)}
    refused["rows"] = [*refused["rows"], rejected_row(SpecConfig(steps=5, topk=4, draft_tokens=8), smoke)]
    job = data.make_job(
        settings, "benchmark", "failed", termination_reason="RELEASE_GATE_FAILED", result=refused
    )
    dashboard.open(f"#/jobs/{job}")
    row = page.locator("#benchmark-table tbody tr", has_text="5,4,8").locator("td")
    expect(row.nth(6)).to_have_text("refused by smoke test: outputs_diverged")
    assert row.nth(3).inner_text() == "—"
    assert "diverge from the baseline" in (row.nth(6).get_attribute("title") or "")
    expect(page.locator("#benchmark-table tbody tr")).to_have_count(6)
    assert dashboard.errors == []


def running_pipeline(settings: Settings) -> tuple[str, list[str]]:
    return data.make_pipeline(
        settings,
        [
            ("extract", "succeeded", {"progress": 1.0}),
            (
                "train",
                "running",
                {"progress": 0.62, "progress_message": "epoch 2/3 · step 186", "gpu_indices": [0]},
            ),
            ("fix_keys", "pending", {}),
            ("gpu_check", "pending", {}),
            ("eval", "pending", {}),
            ("benchmark", "pending", {}),
        ],
    )


def test_a_pipeline_is_watched_on_one_page_and_cancelled(dashboard: Dashboard, settings: Settings) -> None:
    pipeline, jobs = running_pipeline(settings)
    train = jobs[1]
    data.add_metrics(settings, train, data.trainer_metrics())
    data.add_log(
        settings, train, [f"epoch 2 step {s} loss {1.9 - s / 400:.3f} tau 3.1" for s in range(150, 186)]
    )
    page = dashboard.page
    page.on("dialog", lambda dialog: dialog.accept())

    dashboard.open("#/pipelines")
    row = page.locator(f"tr[data-pipeline-id='{pipeline}']")
    expect(row.locator(".step")).to_have_count(6)
    assert row.locator(".step").all_inner_texts()[1].split() == ["train", "running", "62%"]
    dashboard.screenshot("pipelines")

    row.locator("a.mono").click()
    expect(page.locator("#pipeline-jobs tbody tr")).to_have_count(6)
    expect(page.locator("#charts .u-title").first).to_have_text("Loss")
    expect(page.locator("#log .log-line")).to_have_count(36)  # the running step's log
    dashboard.screenshot("pipeline")

    page.get_by_role("button", name="Cancel").click()
    # train's process group is still being ended (no worker runs in this test), so the pipeline is cancelling
    expect(page.locator(".job-head .page-head .badge").first).to_have_text("cancelling", timeout=8000)
    states = page.locator("#pipeline-jobs tbody tr .badge").all_inner_texts()
    assert states == ["succeeded", "cancelling", "cancelled", "cancelled", "cancelled", "cancelled"]
    assert dashboard.errors == []


def test_a_finished_pipeline_ends_with_its_benchmark_table(dashboard: Dashboard, settings: Settings) -> None:
    train = {"epochs": [{"epoch": 1.0, "val/est_accept_len_d5": 3.4}], "best": None, "selected": "/r/epoch_1"}
    evaluated = {
        "depths": [{"depth": 5, "accept_length_meta": 3.0}, {"depth": 10, "accept_length_meta": 3.5}]
    }
    results = {"train": train, "eval": evaluated}
    steps = [
        (kind, "succeeded", {"progress": 1.0, "result": results.get(kind)})
        for kind in ("extract", "train", "fix_keys", "gpu_check", "eval")
    ]
    pipeline, _ = data.make_pipeline(
        settings, [*steps, ("benchmark", "succeeded", {"result": data.sweep_result()})]
    )
    page = dashboard.page
    dashboard.open(f"#/pipelines/{pipeline}")
    expect(page.locator("#benchmark-table tbody tr")).to_have_count(5)
    # acceptance by depth: training's estimate, eval's, the served chain's (5,1,6 → 3.1; 10,1,11 → 3.6)
    rows = page.locator("#acceptance tbody tr")
    expect(rows).to_have_count(3)  # depths 5, 10 and 16 (served only)
    # the measured speedup of the chain beside train's prediction (none: this sweep kept no cost profile)
    assert rows.nth(0).locator("td").all_inner_texts() == [
        "5",
        "3.4",
        "3",
        "3.1",
        "+9.7 %",
        "-3.2 %",
        "2.21",
        "—",
    ]
    assert rows.nth(1).locator("td").all_inner_texts() == [
        "10",
        "—",
        "3.5",
        "3.6",
        "—",
        "-2.8 %",
        "2.37",
        "—",
    ]
    expect(page.locator(".job-head .page-head .badge").first).to_have_text("succeeded")
    assert page.get_by_role("button", name="Cancel").count() == 0
    assert dashboard.errors == []


def test_a_pipeline_that_served_its_held_out_prompts_shows_the_like_for_like_error(
    dashboard: Dashboard, settings: Settings
) -> None:
    """held_out.serve: two more acceptance columns, the engine on the held-out prompts and train's error
    against it (GPU run 8: 2.968 simulated, 2.937 served, +1.1 %)."""
    epoch = {"epoch": 1.0, "held_out/sim_accept_len_d5": 3.4}
    train = {"epochs": [epoch], "best": {"epoch": 1, "checkpoint": "/r/e1"}, "selected": "/r/e1"}
    held_out = {
        "mode": "sweep",
        "engine": "sglang",
        "rows": [data.sweep_rows(lossy=False)[1] | {"accept_len": 3.3}],
    }
    steps = [
        ("train", "succeeded", {"progress": 1.0, "result": train}),
        ("benchmark", "succeeded", {"pipeline_step": "serve_held_out", "result": held_out}),
        ("benchmark", "succeeded", {"result": data.sweep_result()}),
    ]
    pipeline, _ = data.make_pipeline(settings, steps)
    page = dashboard.page
    dashboard.open(f"#/pipelines/{pipeline}")
    expect(page.locator("#benchmark-table tbody tr")).to_have_count(5)  # the sweep's, not the held-out pass's
    head = page.locator("#acceptance thead th").all_inner_texts()
    assert head[-4:] == [
        "served, held-out prompts",
        "train error, same prompts",
        "speedup",
        "predicted speedup",
    ]
    first = page.locator("#acceptance tbody tr").nth(0).locator("td").all_inner_texts()
    assert (first[0], first[3], first[-4], first[-3]) == ("5", "3.1", "3.3", "+3 %")
    assert dashboard.errors == []


def test_a_pipeline_with_two_jobs_of_one_kind_names_them_by_step(
    dashboard: Dashboard, settings: Settings
) -> None:
    failed = {"termination_reason": "NONZERO_EXIT", "message": "no prompts left after the holdout"}
    pipeline, _ = data.make_pipeline(
        settings,
        [
            ("generate", "succeeded", {"progress": 1.0}),
            ("generate", "failed", {"pipeline_step": "generate_held_out", **failed}),
            ("extract", "failed", {"termination_reason": "DEPENDENCY_FAILED"}),
            (
                "extract",
                "failed",
                {"pipeline_step": "extract_held_out", "termination_reason": "DEPENDENCY_FAILED"},
            ),
        ],
    )
    page = dashboard.page
    dashboard.open("#/pipelines")
    row = page.locator(f"tr[data-pipeline-id='{pipeline}']")
    expect(row.locator(".step")).to_have_count(4)
    names = [text.split()[0] for text in row.locator(".step .step-kind").all_inner_texts()]
    assert names == ["generate", "generate_held_out", "extract", "extract_held_out"]
    dashboard.open(f"#/pipelines/{pipeline}")
    expect(page.locator("#pipeline-jobs tbody tr")).to_have_count(4)
    steps = [cells.split("\t")[0] for cells in page.locator("#pipeline-jobs tbody tr").all_inner_texts()]
    assert steps == ["1. generate", "2. generate_held_out", "3. extract", "4. extract_held_out"]
    expect(page.locator(".job-head .notice").first).to_contain_text("no prompts left after the holdout")
    assert dashboard.errors == []


def test_two_benchmarks_ticked_on_the_servers_page_are_compared_draft_against_draft(
    dashboard: Dashboard, settings: Settings
) -> None:
    """The pick survives the list's refreshes; a pair that asked different requests shows the API's reason."""
    ids = []
    for draft, counts, digest in (
        ("/drafts/new", [(90, 30)] * 30, "d" * 64),
        ("/drafts/old", [(60, 30)] * 30, "d" * 64),
        ("/drafts/[other]", [(60, 30)] * 30, "e" * 64),
    ):
        summary = compare_sweep({"5,1,6": counts}, digest=digest)
        params = {"mode": "sweep", "launch": {"model": "/models/t", "draft": draft}}
        job = data.make_job(settings, "benchmark", "failed", params=params, result=summary)
        data.record_benchmark(settings, job, summary)
        with session_scope(settings) as session:
            of_job = select(BenchmarkResult.id).where(BenchmarkResult.job_id == uuid.UUID(job))
            ids.append(str(session.scalars(of_job).one()))
    new, old, other = ids
    page = dashboard.page
    dashboard.open("#/servers")
    expect(page.locator("#benchmarks-table tbody tr")).to_have_count(3)
    page.locator(f"input[data-compare='{new}']").check()
    expect(page.locator("#comparison")).to_contain_text("Tick one more")
    page.locator(f"input[data-compare='{old}']").check()
    row = page.locator("#comparison-table tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("a accepts more")
    assert "+1" in row.inner_text()  # a − b: 3 against 2 tokens a step
    expect(page.locator("#comparison")).to_contain_text("/drafts/new")
    drawn = page.locator("#benchmarks-table").element_handle()
    page.wait_for_function("table => !table.isConnected", arg=drawn)  # the list was drawn again…
    assert page.locator(f"input[data-compare='{old}']").is_checked()  # …under the pick: the ticks stay
    page.locator(f"input[data-compare='{other}']").check()  # a third: the first ticked drops out
    assert not page.locator(f"input[data-compare='{new}']").is_checked()
    expect(page.locator("#comparison .notice-error")).to_contain_text("NOT_COMPARABLE")
    expect(page.locator("#comparison")).to_contain_text("asked different requests")
    assert [e for e in dashboard.errors if "status of 409" not in e] == []  # the refusal is the only one
