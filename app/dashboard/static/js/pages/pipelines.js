// Pipelines (extract → train → fix_keys → gpu_check → eval → benchmark): each as a row of steps with their
// state and progress; one pipeline on its own page with its jobs.

import { getOptional } from "../api.js";
import { ago, h, jobLink, link, notice, progressBar, replace, shortId, stateBadge, table, timeTitle } from "../dom.js";
import { poll } from "../live.js";

const UNAVAILABLE = "This API has no /v1/pipelines yet (an older eyas): pipelines cannot be shown.";

function step(job) {
  return h("a", { class: `step state-${job.state}`, href: `#/jobs/${job.id}`, title: `${job.kind}: ${job.state}` },
    h("span", { class: "step-kind" }, job.kind),
    h("span", { class: "step-state" }, job.state),
    job.progress !== null && job.progress !== undefined && job.state === "running"
      ? h("span", { class: "step-progress", style: { width: `${Math.round(job.progress * 100)}%` } })
      : null);
}

function steps(jobs) {
  return h("div", { class: "steps" }, (jobs || []).map(step));
}

function pipelineRow(pipeline) {
  return h("tr", { dataset: { pipelineId: pipeline.id } },
    h("td", null, link(`#/pipelines/${pipeline.id}`, shortId(pipeline.id), { class: "mono", title: pipeline.id })),
    h("td", null, pipeline.template),
    h("td", null, stateBadge(pipeline.state)),
    h("td", { title: timeTitle(pipeline.created_at) }, ago(pipeline.created_at)),
    h("td", null, steps(pipeline.jobs)));
}

export function mount(root) {
  const body = h("div", { class: "table-wrap" });
  root.append(h("div", { class: "page-head" }, h("h1", null, "Pipelines")), h("section", { class: "panel" }, body));
  return poll(async () => {
    const { available, data } = await getOptional("/v1/pipelines");
    if (!available) return replace(body, notice(UNAVAILABLE));
    if (!data.length) return replace(body, h("p", { class: "empty" }, "No pipelines yet."));
    return replace(body, table(["pipeline", "template", "state", "created", "steps"], data.map(pipelineRow), { id: "pipelines-table" }));
  });
}

function jobsTable(jobs) {
  return table(["step", "job", "state", "progress"], jobs.map((job, i) => h("tr", null,
    h("td", null, `${i + 1}. ${job.kind}`),
    h("td", null, jobLink(job.id)),
    h("td", null, stateBadge(job.state)),
    h("td", { class: "cell-bar" }, progressBar(job.progress ?? (job.state === "succeeded" ? 1 : 0))))));
}

export function mountOne(root, { id }) {
  const head = h("div", { class: "page-head" }, h("h1", null, "Pipeline ", h("span", { class: "mono muted" }, shortId(id))));
  const body = h("div");
  root.append(head, body);
  return poll(async () => {
    const { available, data } = await getOptional(`/v1/pipelines/${id}`);
    if (!available) return replace(body, notice(`No pipeline ${id} (or this API has no pipelines).`, "error"));
    const jobs = data.jobs || [];
    return replace(body,
      h("section", { class: "panel" },
        h("div", { class: "pipeline-meta" }, stateBadge(data.state), ` ${data.template} · created `,
          h("span", { title: timeTitle(data.created_at) }, ago(data.created_at))),
        steps(jobs)),
      h("section", { class: "panel" }, h("h2", { class: "panel-title" }, "Jobs"), jobsTable(jobs)));
  });
}
