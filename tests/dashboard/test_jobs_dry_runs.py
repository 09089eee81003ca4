"""The jobs page hides dry-run launches (renders) by default and shows them with its "dry runs" checkbox."""

from __future__ import annotations

from playwright.sync_api import expect

from app.core.config import Settings
from tests.dashboard import data
from tests.dashboard.conftest import Dashboard


def test_dry_runs_are_hidden_until_the_checkbox_asks_for_them(
    dashboard: Dashboard, settings: Settings
) -> None:
    served = data.make_job(settings, "launch", "running", params={"model": "/m", "dry_run": False})
    rendered = data.make_job(settings, "launch", "succeeded", params={"model": "/m", "dry_run": True})
    trained = data.make_job(settings, "train", "succeeded", minutes_ago=5)
    page = dashboard.page
    dashboard.open("#/jobs")
    page.wait_for_selector(f"tr[data-job-id='{served}']")
    expect(page.locator("#jobs-table tbody tr")).to_have_count(2)
    assert page.locator(f"tr[data-job-id='{trained}']").count() == 1
    assert page.locator(f"tr[data-job-id='{rendered}']").count() == 0

    page.check("input[name=include_dry_runs]")
    page.wait_for_selector(f"tr[data-job-id='{rendered}']")
    expect(page.locator("#jobs-table tbody tr")).to_have_count(3)
    page.select_option("select[name=kind]", "launch")
    expect(page.locator("#jobs-table tbody tr")).to_have_count(2)
    page.uncheck("input[name=include_dry_runs]")
    expect(page.locator("#jobs-table tbody tr")).to_have_count(1)
    assert dashboard.errors == []
