// Pipelines (extract → train → fix_keys → gpu_check → eval → benchmark): the list with each pipeline's steps,
// and one pipeline watched on one page: its steps, the training curves, the log of the step that is running
// and the benchmark table at the end. Jobs are named by their step (`pipeline_step`), not their kind: a
// pipeline with a held-out set runs two generate and two extract jobs (generate_held_out, extract_held_out).

import { getOptional, postJson } from "../api.js";
import { BenchmarkView } from "../benchmark.js";
import {
  ago, between, duration, h, jobLink, jobProgress, link, notice, num, reasonText, replace, section, shortId, stateBadge,
  table, timeTitle,
} from "../dom.js";
import { poll } from "../live.js";
import { LogView } from "../logview.js";
import { MetricsView } from "../metrics.js";

const UNAVAILABLE = "This API has no /v1/pipelines (an older eyas): pipelines cannot be shown.";
const ACTIVE = new Set(["starting", "running", "cancelling"]);
const ENDED_BADLY = new Set(["failed", "cancelled"]);

const stepName = (job) => job.pipeline_step || job.kind;

function step(job) {
  const running = ACTIVE.has(job.state) && job.progress !== null && job.progress !== undefined;
  return h("a", { class: `step state-${job.state}`, href: `#/jobs/${job.id}`, title: `${stepName(job)} (${job.kind}): ${job.state}`, dataset: { step: stepName(job) } },
    h("span", { class: "step-kind" }, stepName(job)),
    h("span", { class: "step-state" }, running ? `${job.state} ${Math.round(job.progress * 100)}%` : job.state),
    running ? h("span", { class: "step-progress", style: { width: `${Math.round(job.progress * 100)}%` } }) : null);
}

function steps(jobs) {
  return h("div", { class: "steps" }, (jobs || []).map(step));
}

function pipelineRow(pipeline) {
  return h("tr", { dataset: { pipelineId: pipeline.id } },
    h("td", null, link(`#/pipelines/${pipeline.id}`, shortId(pipeline.id), { class: "mono", title: pipeline.id })),
    h("td", null, pipeline.template),
    h("td", null, stateBadge(pipeline.state)),
    h("td", null, pipeline.host || "any"),
    h("td", { title: timeTitle(pipeline.created_at) }, ago(pipeline.created_at)),
    h("td", null, steps(pipeline.jobs)));
}

export function mount(root) {
  const body = h("div", { class: "table-wrap" });
  root.append(h("div", { class: "page-head" }, h("h1", null, "Pipelines")), h("section", { class: "panel" }, body));
  return poll(async () => {
    const { available, data } = await getOptional("/v1/pipelines");
    if (!available) return replace(body, notice(UNAVAILABLE));
    if (!data.items.length) return replace(body, h("p", { class: "empty" }, "No pipelines yet. POST /v1/pipelines starts one."));
    const headers = ["pipeline", "template", "state", "host", "created", "steps"];
    return replace(body, table(headers, data.items.map(pipelineRow), { id: "pipelines-table" }));
  });
}

function jobsTable(jobs) {
  return table(["step", "job", "state", "progress", "runtime", "reason / message"], jobs.map((job, i) => {
    const runtime = between(job.running_at || job.started_at, job.finished_at);
    return h("tr", { dataset: { jobId: job.id } },
      h("td", null, `${i + 1}. ${stepName(job)}`),
      h("td", null, jobLink(job.id)),
      h("td", null, stateBadge(job.state)),
      h("td", { class: "cell-bar" }, jobProgress(job)),
      h("td", null, runtime === null ? "—" : duration(runtime)),
      h("td", { class: "cell-message", title: job.message || "" }, reasonText(job)));
  }), { id: "pipeline-jobs" });
}

// The step worth watching: the one running, else the one that failed, else the last one.
function focusJob(jobs) {
  return jobs.find((job) => ACTIVE.has(job.state)) || jobs.find((job) => ENDED_BADLY.has(job.state)) || jobs[jobs.length - 1];
}

function actions(pipeline, refresh) {
  const act = (verb) => async () => {
    if (!window.confirm(`${verb} pipeline ${shortId(pipeline.id)}?`)) return;
    try {
      await postJson(`/v1/pipelines/${pipeline.id}/${verb.toLowerCase()}`);
    } catch (error) {
      window.alert(`${verb} failed: ${error.message}`);
    }
    refresh();
  };
  const live = pipeline.jobs.some((job) => !["succeeded", "failed", "cancelled"].includes(job.state));
  return [
    live ? h("button", { type: "button", class: "btn btn-danger", onclick: act("Cancel") }, "Cancel") : null,
    pipeline.failed_step ? h("button", { type: "button", class: "btn", onclick: act("Retry") }, "Retry from the failed step") : null,
  ];
}

// Acceptance by depth, three ways: training's estimate, eval's torch figure, the serving engine's own; the
// predictions' errors are against the served figure (the API's `acceptance`, app/pipelines/acceptance.py).
const percent = (value) => (value === null || value === undefined ? "—" : `${value > 0 ? "+" : ""}${num(100 * value, 1)} %`);

// With serve_held_out (held_out.serve) two more columns: the engine on the held-out prompts train's estimate
// walks, and the estimate's error against it (like with like).
function acceptanceTable(acceptance) {
  if (!acceptance?.by_depth?.length) return null;
  const served = acceptance.engine ? `served (${acceptance.engine})` : "served";
  const estimate = acceptance.sources?.train?.startsWith("held_out/") ? "train estimate (held-out)" : "train estimate";
  const heldOut = acceptance.by_depth.some((row) => row.served_held_out !== null && row.served_held_out !== undefined);
  const extra = heldOut ? ["served, held-out prompts", "train error, same prompts"] : [];
  return h("div", { class: "panel", id: "acceptance" },
    h("h2", { class: "panel-title" }, "Acceptance length by depth"),
    table(["depth", estimate, "eval", served, "train error", "eval error", ...extra],
      acceptance.by_depth.map((row) => h("tr", null,
        h("td", { class: "mono" }, String(row.depth)),
        h("td", null, num(row.train_estimate, 2)),
        h("td", null, num(row.eval, 2)),
        h("td", null, num(row.served, 2)),
        h("td", null, percent(row.train_error)),
        h("td", { class: acceptance.eval_within_tolerance === false && Math.abs(row.eval_error ?? 0) > acceptance.eval_tolerance ? "bad" : null },
          percent(row.eval_error)),
        heldOut ? h("td", null, num(row.served_held_out, 2)) : null,
        heldOut ? h("td", null, percent(row.train_error_held_out)) : null))));
}

export function mountOne(root, { id }) {
  const head = h("div", { class: "job-head" }, h("p", { class: "muted" }, "Loading pipeline…"));
  const plots = h("div");
  const logPanel = h("div");
  root.append(head, plots, logPanel);
  const views = { train: null, benchmark: null, log: null, logJob: null };

  function watch(jobs) {
    const train = jobs.find((job) => stepName(job) === "train" && job.state !== "pending" && job.state !== "queued");
    if (train && views.train?.jobId !== train.id) {
      views.train?.destroy();
      views.train = new MetricsView(plots, train.id);
    }
    const bench = jobs.find((job) => stepName(job) === "benchmark");
    if (bench && views.benchmark?.jobId !== bench.id) {
      views.benchmark?.destroy();
      views.benchmark = new BenchmarkView(plots, bench.id);
    }
    const focus = focusJob(jobs);
    if (focus && views.logJob !== focus.id) {
      views.log?.destroy();
      views.logJob = focus.id;
      const panel = section(h("span", null, `Log · ${stepName(focus)} `, jobLink(focus.id)));
      replace(logPanel, panel);
      views.log = new LogView(panel, focus.id);
      views.log.start().catch((error) => panel.append(notice(`Log unavailable: ${error.message}`, "error")));
    }
    return Promise.all([views.train?.refresh(), bench ? views.benchmark.refresh(bench) : null]);
  }

  async function refresh() {
    const { available, data } = await getOptional(`/v1/pipelines/${id}`);
    if (!available) return replace(head, notice(`No pipeline ${id} (or this API has no pipelines).`, "error"));
    const jobs = data.jobs || [];
    const failed = data.failed_step ? jobs.find((job) => stepName(job) === data.failed_step || ENDED_BADLY.has(job.state)) : null;
    replace(head,
      h("div", { class: "page-head" },
        h("h1", null, `Pipeline `, h("span", { class: "mono muted", title: data.id }, shortId(data.id))),
        stateBadge(data.state),
        h("span", { class: "muted" }, `${data.template} · host ${data.host || "any"} · created ${ago(data.created_at)}`,
          data.retries ? ` · ${data.retries} retr${data.retries === 1 ? "y" : "ies"}` : ""),
        h("span", { class: "head-actions" }, actions(data, refresh))),
      steps(jobs),
      failed ? notice(`${data.failed_step} ${failed.state}: ${failed.message || failed.termination_reason || ""}`, "error") : null,
      jobsTable(jobs),
      acceptanceTable(data.acceptance));
    return watch(jobs);
  }

  const stop = poll(refresh);
  return () => {
    stop();
    views.train?.destroy();
    views.benchmark?.destroy();
    views.log?.destroy();
  };
}
