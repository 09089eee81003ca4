// Benchmark results of a job: the release verdict, acceptance length and output tokens/s by speculative
// depth (the baseline, depth null, as a dashed line), and the table behind them.

import { getOptional } from "./api.js";
import { DepthChart } from "./charts.js";
import { h, num, replace, table } from "./dom.js";

// A row is named by its config ("steps,topk,draft_tokens": a tree and a chain of the same steps differ);
// results from before configs existed name only a depth.
export const configLabel = (row) => (row.depth === null && !row.config ? "baseline" : row.config || String(row.depth));

// The benchmark stage's result (also stored as a benchmark's summary): {rows, gate: {deployable,
// chosen_config, chosen_depth, speedup, reasons, verdict}}; a flat {rows, reasons} with `deployable` beside
// it is read too.
export function readSweep(summary, deployable) {
  const gate = summary?.gate || {};
  return {
    rows: summary?.rows || [],
    reasons: gate.reasons || summary?.reasons || [],
    deployable: gate.deployable ?? deployable ?? null,
    chosenDepth: gate.chosen_depth ?? null,
    chosenConfig: gate.chosen_config ?? null,
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
    sweep.chosenConfig !== null ? h("span", { class: "muted" }, `chosen config ${sweep.chosenConfig}`)
      : sweep.chosenDepth !== null ? h("span", { class: "muted" }, `chosen depth ${sweep.chosenDepth}`) : null,
    sweep.reasons.length ? h("ul", { class: "reasons" }, sweep.reasons.map((reason) => h("li", null, reason))) : null);
}

const ms = (value) => num(value, 1);
const missing = (value) => value === null || value === undefined;

// The mean speedup and, where the sweep measured one, its 95 % interval (the gate judges the lower bound).
function speedup(row) {
  if (missing(row.speedup)) return "—";
  const mean = `${num(row.speedup, 2)}×`;
  if (missing(row.speedup_ci_low) || missing(row.speedup_ci_high)) return mean;
  return `${mean} [${num(row.speedup_ci_low, 2)}–${num(row.speedup_ci_high, 2)}]`;
}

// outputs_match is "no real loss" (near-ties accepted); bit for bit where the target could not judge.
function outputs(row) {
  if (row.rejected) return `refused by smoke test: ${row.rejected.verdict}`;
  if (missing(row.outputs_match)) return "—";
  if (!row.outputs_match) return row.divergence_judge?.mode === "strict" ? "differ (bit for bit)" : "REAL LOSS";
  if (row.outputs_identical === false) return "no real loss";
  return row.outputs_identical === true ? "identical" : "yes";
}

function divergences(row) {
  const counts = row.divergences;
  if (!counts) return h("td", null, "—");
  const text = `${counts.near_tie} near-tie · ${counts.real_loss} loss · ${counts.unscored} unscored`;
  const details = (row.divergence_details || []).map((d) => `request ${d.request} token ${d.position}: ${d.verdict}`
    + (missing(d.margin) ? "" : ` (margin ${num(d.margin, 3)}, bound ${num(d.bound, 3)})`) + (d.note ? ` ${d.note}` : ""));
  return h("td", { class: counts.real_loss ? "bad" : null, title: details.join("\n") || null }, text);
}

// Chains by steps, then trees (more topk, more draft tokens) after the chain of the same steps.
const order = (row) => [row.depth ?? -1, row.topk ?? 1, row.draft_tokens ?? 0];
const byConfig = (a, b) => order(a).map((value, i) => value - order(b)[i]).find((d) => d !== 0) ?? 0;

export function chosen(row, sweep) {
  if (row.config) return row.config === sweep.chosenConfig;
  return row.depth !== null && row.depth === sweep.chosenDepth;
}

function benchmarkTable(rows, sweep) {
  return table(
    ["config", "accept len", "output tok/s", "speedup [95 % CI]", "TTFT p50 / p99 ms", "ITL p50 / p99 ms",
      "outputs", "divergences"],
    [...rows].sort(byConfig).map((row) => h("tr", { class: chosen(row, sweep) ? "row-chosen" : null },
      h("td", { class: "mono" }, configLabel(row)),
      h("td", null, num(row.accept_len, 2)),
      h("td", null, num(row.output_tok_s, 1)),
      h("td", null, speedup(row)),
      h("td", null, `${ms(row.ttft_p50_ms)} / ${ms(row.ttft_p99_ms)}`),
      h("td", null, `${num(row.itl_p50_ms, 2)} / ${num(row.itl_p99_ms, 2)}`),
      h("td", { class: row.outputs_match === false || row.rejected ? "bad" : null, title: row.rejected?.message || null },
        outputs(row)),
      divergences(row))),
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
      const { available, data } = await getOptional(`/v1/benchmarks?job_id=${encodeURIComponent(this.jobId)}&limit=1`);
      const mine = available ? data.items : [];
      if (mine.length) sweep = readSweep(mine[0].summary, mine[0].deployable);
    }
    const key = JSON.stringify(sweep);
    if (!sweep || !sweep.rows.length || key === this.shown) return;
    this.shown = key;
    this.charts.forEach((chart) => chart.destroy());
    const grid = h("div", { class: "chart-grid" });
    replace(this.body, verdict(sweep), grid, benchmarkTable(sweep.rows, sweep));
    this.root.hidden = false;
    const accept = new DepthChart(grid, { title: "Acceptance length by depth", yLabel: "tokens / verify step", seriesLabel: "accept len" });
    const speed = new DepthChart(grid, { title: "Output tokens/s by depth", yLabel: "tok/s", seriesLabel: "output tok/s" });
    // By depth means chains: a tree of the same steps would share its x (it is in the table).
    const chains = sweep.rows.filter((row) => (row.topk ?? 1) === 1);
    accept.update(chains.map((row) => ({ depth: row.depth, value: row.accept_len ?? null })));
    speed.update(chains.map((row) => ({ depth: row.depth, value: row.output_tok_s ?? null })));
    this.charts = [accept, speed];
  }

  destroy() {
    this.charts.forEach((chart) => chart.destroy());
  }
}
