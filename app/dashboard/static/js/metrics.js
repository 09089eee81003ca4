// A job's metrics by step, drawn so that a training run's ~80 series read at a glance: a few headline figures;
// the loss per split; accuracy by TTT position (colour = position, line style = split, one compact key); the
// accept length by depth (simulated where validation measured it, else estimated); lr, tokens/s and the
// like on small charts of their own; and every metric's newest value in a folded table (metric × split).
// Fetched incrementally.

import { getJson } from "./api.js";
import { formatValue, StepChart } from "./charts.js";
import { h, replace } from "./dom.js";

const PAGE = 5000;
const MAX_OTHER_CHARTS = 4;
const SPLITS = ["train", "train_epoch", "val", "held_out", "eval"];
// per TTT position and epoch summaries: in the table, not on a chart of their own
const TABLE_ONLY = /^(loss_\d+|acc_\d+|full_acc_\d+|cond_acc_\d+|epoch|est_accept_len(_d\d+)?|sim_accept_len(_d\d+)?)$/;

export function splitOf(name) {
  const slash = name.indexOf("/");
  const split = slash > 0 ? name.slice(0, slash) : "";
  return SPLITS.includes(split) ? { split, key: name.slice(slash + 1) } : { split: "", key: name };
}

// Which chart a series goes on, or null for the table alone. train_epoch/ repeats train's figures once an
// epoch: the table keeps it, the charts do not.
function chartOf(name, simulated) {
  const { split, key } = splitOf(name);
  if (split === "train_epoch" || split === "eval") return null;
  if (key === "loss") return "loss";
  if (/^acc_\d+$/.test(key)) return "acc";
  if (/^sim_accept_len_d\d+$/.test(key)) return "accept";
  // a split whose validation simulated serving shows that, its per-position estimate stays in the table;
  // training shows its running estimate at the unroll (the log's "tau"), its per-depth ones in the table
  if (key === "est_accept_len") return simulated.has(split) ? null : "accept";
  if (/^est_accept_len_d\d+$/.test(key)) return simulated.has(split) || split === "train" ? null : "accept";
  if (TABLE_ONLY.test(key) || (split !== "" && split !== "train")) return null;
  return name;
}

const CHARTS = {
  loss: { title: "Loss", yLabel: "loss" },
  acc: { title: "Accuracy by TTT position", yLabel: "accuracy", compactKey: true },
  accept: { title: "Accept length by depth (simulated serving, else estimated)", yLabel: "tokens / step", compactKey: true },
};

// The figures worth a glance, newest value each, in this order (those the run reported).
const HEADLINE = [
  /^(train\/)?loss$/, /^val\/loss$/, /^held_out\/loss$/,
  /^held_out\/sim_accept_len_d\d+$/, /^val\/sim_accept_len_d\d+$/, /^(train\/)?est_accept_len$/,
  /^epoch$/, /^(train\/)?lr$/, /^(train\/)?tokens_per_s$/,
];

export class MetricsView {
  constructor(container, jobId) {
    this.jobId = jobId;
    this.series = new Map(); // name -> Map(step -> value)
    this.maxStep = null;
    this.charts = new Map(); // chart -> StepChart
    this.latest = h("div", { class: "metric-latest", id: "metric-latest" });
    this.grid = h("div", { class: "chart-grid", id: "charts" });
    this.table = h("details", { class: "metric-table", id: "metric-table" });
    this.root = h("section", { class: "panel", id: "metrics", hidden: true },
      h("h2", { class: "panel-title" }, "Metrics"), this.latest, this.grid, this.table);
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
    const simulated = new Set([...this.series.keys()].filter((n) => /sim_accept_len_d\d+$/.test(n)).map((n) => splitOf(n).split));
    const groups = new Map();
    for (const [name, points] of this.series) {
      const chart = chartOf(name, simulated);
      if (chart === null) continue;
      if (!groups.has(chart)) groups.set(chart, new Map());
      groups.get(chart).set(name, [...points.entries()].sort((a, b) => a[0] - b[0]));
    }
    const fixed = ["loss", "acc", "accept"].filter((chart) => groups.has(chart));
    const others = [...groups.keys()].filter((chart) => !CHARTS[chart]).sort().slice(0, MAX_OTHER_CHARTS);
    for (const chart of [...fixed, ...others]) this.chartFor(chart).update(groups.get(chart));
    this.renderLatest();
    this.renderTable();
  }

  chartFor(chart) {
    if (!this.charts.has(chart)) {
      const spec = CHARTS[chart] || { title: chart, yLabel: "" };
      this.charts.set(chart, new StepChart(this.grid, spec));
    }
    return this.charts.get(chart);
  }

  newest(name) {
    const points = this.series.get(name);
    let step = -Infinity;
    for (const key of points.keys()) step = Math.max(step, key);
    return { step, value: points.get(step) };
  }

  renderLatest() {
    const names = [...this.series.keys()].sort();
    const chosen = HEADLINE.flatMap((pattern) => names.filter((name) => pattern.test(name)));
    replace(this.latest, [...new Set(chosen)].map((name) => {
      const { step, value } = this.newest(name);
      return h("span", { class: "metric-chip", title: `step ${step}` }, h("b", null, name), " ", formatValue(value));
    }));
  }

  // Every metric's newest value: one row per metric, one column per split that reported it ("run" for a
// name without a split, such as epoch).
  renderTable() {
    const byKey = new Map();
    const splits = new Set();
    for (const name of this.series.keys()) {
      const { split, key } = splitOf(name);
      splits.add(split);
      if (!byKey.has(key)) byKey.set(key, new Map());
      byKey.get(key).set(split, name);
    }
    const columns = ["", ...SPLITS].filter((split) => splits.has(split));
    const open = this.table.open;
    const rows = [...byKey.keys()].sort(naturally).map((key) => h("tr", null,
      h("td", { class: "mono" }, key),
      columns.map((split) => {
        const name = byKey.get(key).get(split);
        if (!name) return h("td", { class: "muted" }, "");
        const { step, value } = this.newest(name);
        return h("td", { class: "num", title: `${name} at step ${step}` }, formatValue(value));
      })));
    replace(this.table,
      h("summary", null, `All ${this.series.size} metrics: newest values by split`),
      h("table", { class: "table metric-values" },
        h("thead", null, h("tr", null, h("th", null, "metric"), columns.map((split) => h("th", null, split || "run")))),
        h("tbody", null, rows)));
    this.table.open = open;
  }

  destroy() {
    for (const chart of this.charts.values()) chart.destroy();
  }
}

// acc_2 before acc_10
function naturally(a, b) {
  return a.localeCompare(b, undefined, { numeric: true });
}
