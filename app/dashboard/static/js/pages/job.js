// One job: state, progress and facts (revalidated with ETag every 2 s), metrics plots, benchmark results,
// the live log, the state history, params and result.

import { ApiError, getIfChanged, getJson, postJson } from "../api.js";
import { BenchmarkView } from "../benchmark.js";
import {
  ago, between, duration, h, jobProgress, json, link, notice, progressBar, replace, section, shortId, stateBadge, table, timeTitle,
} from "../dom.js";
import { poll } from "../live.js";
import { LogView } from "../logview.js";
import { MetricsView } from "../metrics.js";

function fact(label, value, title) {
  return h("div", { class: "fact" }, h("dt", null, label), h("dd", { title: title || null }, value ?? "—"));
}

function when(iso) {
  return iso ? h("span", { title: timeTitle(iso) }, ago(iso)) : "—";
}

function facts(job) {
  const runtime = between(job.running_at || job.started_at, job.finished_at);
  return h("dl", { class: "facts" },
    fact("host", job.host || "any"),
    fact("GPUs", job.gpu_indices?.length ? job.gpu_indices.join(", ") : String(job.gpus_requested)),
    fact("attempt", `${job.attempt} / ${job.max_attempts}`),
    fact("worker", job.worker, job.pid ? `pid ${job.pid}` : null),
    fact("created", when(job.created_at)),
    fact("started", when(job.running_at || job.started_at)),
    fact("finished", when(job.finished_at)),
    fact("runtime", runtime === null ? "—" : duration(runtime)),
    fact("timeout", job.timeout_s ? duration(job.timeout_s) : "none"),
    fact("pipeline", job.pipeline_id ? link(`#/pipelines/${job.pipeline_id}`, shortId(job.pipeline_id)) : "—"),
    fact("exit code", job.exit_code === null ? "—" : String(job.exit_code)),
    fact("reason", job.termination_reason));
}

function header(job, onCancel) {
  const cancellable = !job.terminal && job.state !== "cancelling";
  return h("div", { class: "job-head" },
    h("div", { class: "page-head" },
      h("h1", null, `${job.kind} `, h("span", { class: "mono muted", title: job.id }, shortId(job.id))),
      stateBadge(job.state),
      cancellable ? h("button", { type: "button", class: "btn btn-danger", id: "cancel-job", onclick: onCancel }, "Cancel") : null),
    h("div", { class: "job-progress" }, jobProgress(job) || progressBar(0, job.state)),
    job.message ? notice(job.message, job.state === "failed" ? "error" : "info") : null,
    facts(job));
}

function eventsTable(events) {
  return table(["at", "from", "to", "reason", "message"], events.map((event) => h("tr", null,
    h("td", { title: timeTitle(event.at) }, new Date(event.at).toLocaleTimeString()),
    h("td", null, event.from_state ? stateBadge(event.from_state) : "—"),
    h("td", null, stateBadge(event.to_state)),
    h("td", null, event.reason || ""),
    h("td", { class: "cell-message" }, event.message || ""))));
}

export function mount(root, { id }) {
  const head = h("div", { id: "job-head" }, h("p", { class: "muted" }, "Loading job…"));
  const plots = h("div");
  const logPanel = section("Log");
  logPanel.id = "log-panel";
  const events = h("div");
  const details = h("div", { class: "two-col" });
  root.append(head, plots, logPanel, section("State history", events), details);
  const metrics = new MetricsView(plots, id);
  const benchmark = new BenchmarkView(plots, id);
  let job = null;
  let log = null;

  async function cancel() {
    if (!window.confirm(`Cancel ${job.kind} job ${shortId(id)}?`)) return;
    await postJson(`/v1/jobs/${id}/cancel`);
    refresh();
  }

  async function refresh() {
    const { changed, data } = await getIfChanged(`/v1/jobs/${id}`);
    if (changed) {
      job = data;
      replace(head, header(job, () => cancel().catch((error) => window.alert(error.message))));
      replace(events, eventsTable(await getJson(`/v1/jobs/${id}/events`)));
      replace(details, section("Params", json(job.params)), section("Result", json(job.result)));
      if (job.kind === "benchmark") await benchmark.refresh(job);
      if (!log) {
        log = new LogView(logPanel, id, { onEnd: () => refresh() });
        log.start().catch((error) => logPanel.append(notice(`Log unavailable: ${error.message}`, "error")));
      }
    }
    if (changed || !job.terminal) await metrics.refresh();
  }

  // A job that does not exist is an answer, not an outage: say so once and stop asking.
  const stop = poll((stopPolling) => refresh().catch((error) => {
    if (!(error instanceof ApiError && error.status === 404)) throw error;
    stopPolling();
    replace(head, notice(`No job ${id}: it does not exist on this eyas (deleted, or a wrong link).`, "error"));
    plots.hidden = true;
    logPanel.hidden = true;
    events.parentElement.hidden = true;
    details.hidden = true;
  }));
  return () => {
    stop();
    log?.destroy();
    metrics.destroy();
    benchmark.destroy();
  };
}
