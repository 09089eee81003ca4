"""The dashboard in headless Chromium against the real API and database: token gate, jobs, hosts, escaping."""

from __future__ import annotations

import httpx
from playwright.sync_api import expect

from app.core.config import Settings
from tests.dashboard import data
from tests.dashboard.conftest import Dashboard


def test_the_token_is_asked_once_and_kept_for_the_session(fresh_tab: Dashboard, admin_token: str) -> None:
    page = fresh_tab.page
    fresh_tab.open("#/jobs")
    page.wait_for_selector("#token-form")
    fresh_tab.screenshot("token")
    page.fill("#token-input", "eyas_not-a-real-token")
    page.click("#token-form button[type=submit]")
    expect(page.locator("#token-error")).to_contain_text("not accepted")

    page.fill("#token-input", admin_token)
    page.click("#token-form button[type=submit]")
    page.wait_for_selector("[data-page=jobs] .empty")
    assert page.evaluate("sessionStorage.getItem('eyas.token')") == admin_token

    page.reload()
    page.wait_for_selector("[data-page=jobs] .empty")
    page.click("#sign-out")
    page.wait_for_selector("#token-form")
    assert page.evaluate("sessionStorage.getItem('eyas.token')") is None
    # The 401 of the wrong token is the browser's one console error; nothing else went wrong.
    assert [e for e in fresh_tab.errors if "401" not in e] == []


def test_jobs_list_shows_live_state(dashboard: Dashboard, settings: Settings, admin: dict[str, str]) -> None:
    done = data.make_job(settings, "extract", "succeeded", progress=1.0, minutes_ago=42)
    data.make_job(settings, "fix_keys", "failed", termination_reason="NONZERO_EXIT", message="2 keys missing")
    data.make_job(settings, "gpu_check", "succeeded", progress=1.0, minutes_ago=12)
    data.make_job(settings, "eval", "cancelled", termination_reason="USER_CANCELLED", minutes_ago=9)
    running = data.make_job(
        settings, "train", "running", progress=0.37, progress_message="epoch 2/5 · step 370"
    )
    data.make_job(settings, "benchmark", "pending", minutes_ago=2)
    data.make_job(settings, "selftest", "queued", host="gpu-b", minutes_ago=1)
    page = dashboard.page
    dashboard.open("#/jobs")
    page.wait_for_selector(f"tr[data-job-id='{running}'][data-state=running]")
    assert page.locator("#jobs-table tbody tr").count() == 7
    assert "epoch 2/5" in dashboard.text(f"tr[data-job-id='{running}']")
    assert "NONZERO_EXIT" in dashboard.text("tr[data-state=failed]")
    dashboard.screenshot("jobs")

    cancelled = httpx.post(f"{dashboard.url}/v1/jobs/{running}/cancel", headers=admin)
    assert cancelled.status_code == 202
    page.wait_for_selector(f"tr[data-job-id='{running}'][data-state=cancelling]", timeout=6000)
    page.select_option("select[name=state]", "succeeded")
    expect(page.locator("#jobs-table tbody tr")).to_have_count(2)
    assert page.locator(f"tr[data-job-id='{done}']").count() == 1
    page.select_option("select[name=kind]", "extract")
    expect(page.locator("#jobs-table tbody tr")).to_have_count(1)
    assert dashboard.errors == []


def test_hosts_show_gpus_processes_and_leases(
    dashboard: Dashboard, settings: Settings, start_worker: object
) -> None:
    start_worker("gpu-a")  # type: ignore[operator]
    train = data.make_job(settings, "train", "running", progress=0.5)
    data.report_gpu_host(
        settings,
        "gpu-h200",
        [
            data.h200(
                0,
                71_250.0,
                97.0,
                [{"pid": 4242, "name": "python -m workers.stage_main", "used_memory_mib": 70_610.0}],
            ),
            data.h200(
                1, 140_100.0, 64.0, [{"pid": 5151, "name": "sglang::scheduler", "used_memory_mib": 139_500.0}]
            ),
            data.h200(2, 615.0, 0.0, []),
        ],
    )
    assert data.lease_gpus(settings, "gpu-h200", 2, train) == [0, 1]
    page = dashboard.page
    dashboard.open("#/hosts")
    page.wait_for_selector("[data-host=gpu-h200] tr.gpu")
    page.wait_for_selector("[data-host=gpu-a]")
    card = "[data-host=gpu-h200]"
    assert page.locator(f"{card} tr.gpu").count() == 3
    assert "69.6 GiB / 140.4 GiB" in dashboard.text(f"{card} tr[data-gpu-index='0']")
    assert "sglang::scheduler" in dashboard.text(f"{card} tr[data-gpu-index='1']")
    assert page.locator(f"{card} tr[data-gpu-index='1'] .bar-hot").count() == 1  # 97% of memory used
    assert train[:8] in dashboard.text(f"{card} tr[data-gpu-index='0']")
    assert "free" in dashboard.text(f"{card} tr[data-gpu-index='2']")
    assert page.locator("[data-host=gpu-a] .dot-on").count() == 1
    dashboard.screenshot("hosts")
    assert dashboard.errors == []


def test_log_text_is_shown_as_text_never_as_markup(dashboard: Dashboard, settings: Settings) -> None:
    job = data.make_job(settings, "selftest", "succeeded", progress=1.0)
    data.add_log(
        settings,
        job,
        [
            '<img src=x onerror="window.pwned=1">',
            "<script>window.pwned=2</script>",
            "\x1b[31mred\x1b[0m plain \x1b[1;32mbold green\x1b[0m",
            "progress 10%\rprogress 100%",
            "bell\x07 and \x1b]0;title\x07osc",
        ],
    )
    page = dashboard.page
    dashboard.open(f"#/jobs/{job}")
    page.wait_for_selector("#log-status.log-ended")
    lines = page.locator("#log .log-text").all_inner_texts()
    assert lines == [
        '<img src=x onerror="window.pwned=1">',
        "<script>window.pwned=2</script>",
        "red plain bold green",
        "progress 100%",
        "bell and osc",
    ]
    assert page.locator("#log img, #log script").count() == 0
    assert page.evaluate("window.pwned") is None
    assert page.locator("#log .ansi-red").inner_text() == "red"
    assert page.locator("#log .ansi-green.ansi-bold").inner_text() == "bold green"
    assert dashboard.errors == []


def test_a_revoked_token_sends_the_reader_back_to_the_form(
    fresh_tab: Dashboard, admin: dict[str, str]
) -> None:
    created = httpx.post(
        f"{fresh_tab.url}/v1/tokens", json={"name": "watcher", "scopes": ["read"]}, headers=admin
    ).json()
    page = fresh_tab.page
    fresh_tab.open("#/hosts")
    page.fill("#token-input", created["token"])
    page.click("#token-form button[type=submit]")
    page.wait_for_selector("[data-page=hosts]")  # read scope is enough to watch

    revoked = httpx.post(f"{fresh_tab.url}/v1/tokens/{created['id']}/revoke", headers=admin)
    assert revoked.status_code == 200
    expect(page.locator("#token-error")).to_contain_text("rejected the token", timeout=8000)
    assert page.evaluate("sessionStorage.getItem('eyas.token')") is None
