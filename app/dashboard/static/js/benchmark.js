// Benchmark results of a job: the release verdict, acceptance length and output tokens/s by speculative
// depth (the baseline, depth null, as a dashed line), and the table behind them.

import { getOptional } from "./api.js";
import { DepthChart } from "./charts.js";
import { h, num, replace, table } from "./dom.js";

const depthLabel = (depth) => (depth === null ? "baseline" : String(depth));

function verdict(result) {
  const reasons = result.summary?.reasons || [];
  const ok = result.deployable;
  const label = ok === true ? "deployable" : ok === false ? "not deployable" : "no verdict";
  return h("div", { class: "verdict" },
    h("span", { class: `badge ${ok === true ? "state-succeeded" : ok === false ? "state-failed" : ""}` }, label),
    reasons.length ? h("ul", { class: "reasons" }, reasons.map((reason) => h("li", null, reason))) : null);
}

export function benchmarkTable(rows) {
  const sorted = [...rows].sort((a, b) => (a.depth ?? -1) - (b.depth ?? -1));
  return table(
    ["depth", "accept len", "output tok/s", "speedup", "TTFT p50 ms", "ITL p50 ms", "outputs match"],
    sorted.map((row) => h("tr", null,
      h("td", null, depthLabel(row.depth)),
      h("td", null, num(row.accept_len, 2)),
      h("td", null, num(row.output_tok_s, 1)),
      h("td", null, row.speedup === null || row.speedup === undefined ? "—" : `${num(row.speedup, 2)}×`),
      h("td", null, num(row.ttft_p50_ms, 1)),
      h("td", null, num(row.itl_p50_ms, 2)),
      h("td", null, row.outputs_match === null || row.outputs_match === undefined ? "—" : row.outputs_match ? "yes" : "NO"))),
    { class: "table benchmark-table" },
  );
}

export class BenchmarkView {
  constructor(container, jobId) {
    this.jobId = jobId;
    this.body = h("div");
    this.charts = [];
    this.root = h("section", { class: "panel", id: "benchmark", hidden: true },
      h("h2", { class: "panel-title" }, "Benchmark"), this.body);
    container.append(this.root);
  }

  async refresh() {
    const { available, data } = await getOptional(`/v1/benchmarks?job_id=${this.jobId}`);
    const results = available ? data.filter((result) => result.job_id === this.jobId) : [];
    if (!results.length) return;
    const latest = results.sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at))[0];
    const rows = latest.summary?.rows || [];
    if (this.shown === latest.id) return;
    this.shown = latest.id;
    this.charts.forEach((chart) => chart.destroy());
    const grid = h("div", { class: "chart-grid" });
    replace(this.body, verdict(latest), grid, benchmarkTable(rows));
    this.root.hidden = false;
    const accept = new DepthChart(grid, { title: "Acceptance length by depth", yLabel: "tokens / step", seriesLabel: "accept len" });
    const speed = new DepthChart(grid, { title: "Output tokens/s by depth", yLabel: "tok/s", seriesLabel: "output tok/s" });
    accept.update(rows.map((row) => ({ depth: row.depth, value: row.accept_len ?? null })));
    speed.update(rows.map((row) => ({ depth: row.depth, value: row.output_tok_s ?? null })));
    this.charts = [accept, speed];
  }

  destroy() {
    this.charts.forEach((chart) => chart.destroy());
  }
}
