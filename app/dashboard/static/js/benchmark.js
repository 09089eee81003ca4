// Benchmark results of a job: the release verdict, acceptance length and output tokens/s by speculative
// depth (the baseline, depth null, as a dashed line), and the table behind them.

import { getOptional } from "./api.js";
import { DepthChart } from "./charts.js";
import { h, num, replace, table } from "./dom.js";

const depthLabel = (depth) => (depth === null ? "baseline" : String(depth));

// The benchmark stage's result (also stored as a benchmark's summary): {rows, gate: {deployable,
// chosen_depth, speedup, reasons}}; a flat {rows, reasons} with `deployable` beside it is read too.
export function readSweep(summary, deployable) {
  const gate = summary?.gate || {};
  return {
    rows: summary?.rows || [],
    reasons: gate.reasons || summary?.reasons || [],
    deployable: gate.deployable ?? deployable ?? null,
    chosenDepth: gate.chosen_depth ?? null,
  };
}

export function verdictBadge(deployable) {
  const label = deployable === true ? "deployable" : deployable === false ? "not deployable" : "no verdict";
  const state = deployable === true ? "state-succeeded" : deployable === false ? "state-failed" : "";
  return h("span", { class: `badge ${state}` }, label);
}

function verdict(sweep) {
  return h("div", { class: "verdict", id: "verdict" },
    verdictBadge(sweep.deployable),
    sweep.chosenDepth !== null ? h("span", { class: "muted" }, `chosen depth ${sweep.chosenDepth}`) : null,
    sweep.reasons.length ? h("ul", { class: "reasons" }, sweep.reasons.map((reason) => h("li", null, reason))) : null);
}

const ms = (value) => num(value, 1);
const match = (value) => (value === null || value === undefined ? "—" : value ? "yes" : "NO");

function benchmarkTable(rows, chosenDepth = null) {
  const sorted = [...rows].sort((a, b) => (a.depth ?? -1) - (b.depth ?? -1));
  return table(
    ["depth", "accept len", "output tok/s", "speedup", "TTFT p50 / p99 ms", "ITL p50 / p99 ms", "outputs match"],
    sorted.map((row) => h("tr", { class: row.depth !== null && row.depth === chosenDepth ? "row-chosen" : null },
      h("td", null, depthLabel(row.depth)),
      h("td", null, num(row.accept_len, 2)),
      h("td", null, num(row.output_tok_s, 1)),
      h("td", null, row.speedup === null || row.speedup === undefined ? "—" : `${num(row.speedup, 2)}×`),
      h("td", null, `${ms(row.ttft_p50_ms)} / ${ms(row.ttft_p99_ms)}`),
      h("td", null, `${num(row.itl_p50_ms, 2)} / ${num(row.itl_p99_ms, 2)}`),
      h("td", { class: row.outputs_match === false ? "bad" : null }, match(row.outputs_match)))),
    { class: "table benchmark-table", id: "benchmark-table" },
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

  // The job's own result holds the sweep (also when the release gate failed it); /v1/benchmarks is the
  // fallback for a job whose result was not kept.
  async refresh(job) {
    let sweep = job.result?.rows ? readSweep(job.result, null) : null;
    if (!sweep && job.terminal) {
      const { available, data } = await getOptional("/v1/benchmarks?limit=500");
      const mine = available ? data.filter((result) => result.job_id === this.jobId) : [];
      if (mine.length) sweep = readSweep(mine[0].summary, mine[0].deployable);
    }
    const key = JSON.stringify(sweep);
    if (!sweep || !sweep.rows.length || key === this.shown) return;
    this.shown = key;
    this.charts.forEach((chart) => chart.destroy());
    const grid = h("div", { class: "chart-grid" });
    replace(this.body, verdict(sweep), grid, benchmarkTable(sweep.rows, sweep.chosenDepth));
    this.root.hidden = false;
    const accept = new DepthChart(grid, { title: "Acceptance length by depth", yLabel: "tokens / verify step", seriesLabel: "accept len" });
    const speed = new DepthChart(grid, { title: "Output tokens/s by depth", yLabel: "tok/s", seriesLabel: "output tok/s" });
    accept.update(sweep.rows.map((row) => ({ depth: row.depth, value: row.accept_len ?? null })));
    speed.update(sweep.rows.map((row) => ({ depth: row.depth, value: row.output_tok_s ?? null })));
    this.charts = [accept, speed];
  }

  destroy() {
    this.charts.forEach((chart) => chart.destroy());
  }
}
