// Jobs, newest first, refreshed every 2 s; filters live in the page, not the URL.

import { getJson } from "../api.js";
import { ago, between, duration, h, jobLink, jobProgress, reasonText, replace, stateBadge, table, timeTitle } from "../dom.js";
import { poll } from "../live.js";

const STATES = ["", "pending", "queued", "starting", "running", "cancelling", "succeeded", "failed", "cancelled"];
const KINDS = ["", "selftest", "gpu_check", "extract", "train", "fix_keys", "doctor", "eval", "launch", "benchmark"];
const PAGE = 50;
const MAX_ROWS = 500;

function select(name, options, onChange) {
  return h(
    "select",
    { name, onchange: onChange },
    options.map((value) => h("option", { value }, value || `any ${name}`)),
  );
}

function openJob(id) {
  if (!window.getSelection().toString()) location.hash = `#/jobs/${id}`; // a drag to copy text is no click
}

function jobRow(job) {
  const runtime = between(job.running_at || job.started_at, job.finished_at);
  return h(
    "tr",
    { class: "clickable", dataset: { jobId: job.id, state: job.state }, onclick: () => openJob(job.id) },
    h("td", null, jobLink(job.id)),
    h("td", null, job.kind),
    h("td", null, stateBadge(job.state)),
    h("td", { class: "cell-bar" }, jobProgress(job)),
    h("td", null, job.host || "—"),
    h("td", { title: timeTitle(job.created_at) }, ago(job.created_at)),
    h("td", null, runtime === null ? "—" : duration(runtime)),
    h("td", { class: "cell-message", title: job.message || "" }, reasonText(job)),
  );
}

export function mount(root) {
  const filters = { state: "", kind: "", host: "" };
  let showDryRuns = false;
  let limit = PAGE;
  let lastBody = "";
  let renderedAt = 0;
  const body = h("div", { class: "table-wrap" });
  const more = h("button", { type: "button", class: "btn", hidden: true }, "Show more");
  const count = h("span", { class: "muted" });

  async function refresh() {
    const query = new URLSearchParams({ limit: String(limit) });
    for (const [key, value] of Object.entries(filters)) if (value) query.set(key, value);
    if (showDryRuns) query.set("include_dry_runs", "true"); // dry-run launches (renders) are hidden by default
    const page = await getJson(`/v1/jobs?${query}`);
    const text = JSON.stringify(page);
    // Nothing changed: keep the DOM (and the reader's selection); redraw now and then for the "ago" column.
    if (text === lastBody && Date.now() - renderedAt < 30000) return;
    lastBody = text;
    renderedAt = Date.now();
    count.textContent = `${page.items.length} job${page.items.length === 1 ? "" : "s"}`;
    more.hidden = !page.next_cursor || limit >= MAX_ROWS;
    const rows = page.items.map(jobRow);
    const headers = ["job", "kind", "state", "progress", "host", "created", "runtime", "reason / message"];
    replace(body, rows.length ? table(headers, rows, { id: "jobs-table" }) : h("p", { class: "empty" }, "No jobs yet."));
  }

  let stop = poll(refresh);
  const restart = () => {
    stop();
    lastBody = "";
    stop = poll(refresh);
  };
  const onFilter = (event) => {
    filters[event.target.name] = event.target.value.trim();
    limit = PAGE;
    restart();
  };
  more.addEventListener("click", () => {
    limit = Math.min(MAX_ROWS, limit + PAGE);
    restart();
  });
  const hostInput = h("input", { name: "host", placeholder: "host", size: 12 });
  hostInput.addEventListener("change", onFilter);
  const dryRunBox = h("input", { type: "checkbox", name: "include_dry_runs" });
  dryRunBox.addEventListener("change", () => {
    showDryRuns = dryRunBox.checked;
    limit = PAGE;
    restart();
  });
  const dryRunToggle = h("label", { class: "muted", title: "launch dry runs (renders) are hidden by default" }, dryRunBox, " dry runs");
  root.append(
    h("div", { class: "page-head" },
      h("h1", null, "Jobs"),
      h("div", { class: "filters" }, select("state", STATES, onFilter), select("kind", KINDS, onFilter), hostInput, dryRunToggle, count)),
    h("section", { class: "panel" }, body, h("div", { class: "panel-foot" }, more)),
  );
  return () => stop();
}
