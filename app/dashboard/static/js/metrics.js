// A job's metrics by step: every *loss* series on one chart, every *acc_* (accuracy per TTT position) on
// another, every est_accept_len* and sim_accept_len* (by depth, split and held-out) on a third, each other metric (lr,
// tokens_per_s…) on its own; fetched incrementally.

import { getJson } from "./api.js";
import { formatValue, StepChart } from "./charts.js";
import { h, replace } from "./dom.js";

const PAGE = 5000;
const MAX_OTHER_CHARTS = 6;

function groupOf(name) {
  if (name.includes("loss")) return "loss";
  if (/acc_\d+/.test(name)) return "acc";
  // one chart for every acceptance estimate: each depth, per position and simulated, split and held-out
  if (name.includes("est_accept_len") || name.includes("sim_accept_len")) return "est_accept_len";
  return name;
}

export class MetricsView {
  constructor(container, jobId) {
    this.jobId = jobId;
    this.series = new Map(); // name -> Map(step -> value)
    this.maxStep = null;
    this.charts = new Map(); // group -> StepChart
    this.latest = h("div", { class: "metric-latest", id: "metric-latest" });
    this.grid = h("div", { class: "chart-grid", id: "charts" });
    this.root = h("section", { class: "panel", id: "metrics", hidden: true },
      h("h2", { class: "panel-title" }, "Metrics"), this.latest, this.grid);
    container.append(this.root);
  }

  // Rows at or after the last step seen: a series reported later for that step (val/loss) is not missed.
  async fetchNew() {
    let since = this.maxStep === null ? null : this.maxStep - 1;
    let added = 0;
    for (;;) {
      const query = new URLSearchParams({ limit: String(PAGE) });
      if (since !== null) query.set("since_step", String(since));
      const rows = await getJson(`/v1/jobs/${this.jobId}/metrics?${query}`);
      for (const { name, step, value } of rows) {
        if (!this.series.has(name)) this.series.set(name, new Map());
        if (this.series.get(name).get(step) !== value) added += 1;
        this.series.get(name).set(step, value);
        this.maxStep = this.maxStep === null ? step : Math.max(this.maxStep, step);
      }
      const lastStep = rows.length ? rows[rows.length - 1].step : null;
      if (rows.length < PAGE || lastStep === null || lastStep - 1 === since) return added;
      since = lastStep - 1;
    }
  }

  async refresh() {
    if ((await this.fetchNew()) === 0) return;
    this.root.hidden = false;
    const groups = new Map();
    for (const [name, points] of this.series) {
      const group = groupOf(name);
      if (!groups.has(group)) groups.set(group, new Map());
      groups.get(group).set(name, [...points.entries()].sort((a, b) => a[0] - b[0]));
    }
    const order = [...groups.keys()].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
    for (const group of order.slice(0, 2 + MAX_OTHER_CHARTS)) this.chartFor(group).update(groups.get(group));
    this.renderLatest();
  }

  chartFor(group) {
    if (!this.charts.has(group)) {
      const title = group === "loss" ? "Loss" : group === "acc" ? "Accuracy by TTT position" : group;
      const yLabel = group === "acc" ? "accuracy" : group === "loss" ? "loss" : "";
      this.charts.set(group, new StepChart(this.grid, { title, yLabel }));
    }
    return this.charts.get(group);
  }

  renderLatest() {
    const items = [...this.series.keys()].sort().map((name) => {
      const points = this.series.get(name);
      let step = -Infinity;
      for (const key of points.keys()) step = Math.max(step, key);
      return h("span", { class: "metric-chip", title: `step ${step}` }, h("b", null, name), " ", formatValue(points.get(step)));
    });
    replace(this.latest, items);
  }

  destroy() {
    for (const chart of this.charts.values()) chart.destroy();
  }
}

function rank(group) {
  return group === "loss" ? 0 : group === "acc" ? 1 : 2;
}
