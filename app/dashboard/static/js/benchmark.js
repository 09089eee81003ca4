// Benchmark results of a job: the release verdict, acceptance length and output tokens/s by speculative
// depth (the baseline, depth null, as a dashed line), and the table behind them.

import { getOptional } from "./api.js";
import { DepthChart } from "./charts.js";
import { h, num, replace, table } from "./dom.js";

const missing = (value) => value === null || value === undefined;

// A row is named by its config ("steps,topk,draft_tokens": a tree and a chain of the same steps differ);
// results from before configs existed name only a depth.
export const configLabel = (row) => (row.depth === null && !row.config ? "baseline" : row.config || String(row.depth));

// The benchmark stage's result (also stored as a benchmark's summary): {rows, gate: {deployable,
// speedup_required, chosen_config, chosen_depth, speedup, reasons, verdict}}; a flat {rows, reasons} with
// `deployable` beside it is read too.
export function readSweep(summary, deployable) {
  const gate = summary?.gate || {};
  const threshold = gate.threshold ?? null;
  return {
    rows: summary?.rows || [],
    reasons: gate.reasons || summary?.reasons || [],
    deployable: gate.deployable ?? deployable ?? null,
    // a threshold of 0 asks for no speedup (the CPU demos): passing it says nothing about speed
    speedupRequired: gate.speedup_required ?? (threshold === null ? null : threshold > 0),
    threshold,
    verdict: gate.verdict || null,
    outcome: gate.outcome ?? null,
    chosenDepth: gate.chosen_depth ?? null,
    chosenConfig: gate.chosen_config ?? null,
  };
}

// Green only for a sweep that was asked for a speedup and showed one; a sweep that required none and
// whose outputs passed is grey, however slow it measured.
export function verdictBadge(sweep) {
  const { deployable, speedupRequired, outcome } = sweep;
  // `outcome` "inconclusive": the outputs passed but the speedup's interval was too wide to call.
  if (outcome === "inconclusive") return h("span", { class: "badge" }, "inconclusive");
  if (deployable === true && speedupRequired === false) {
    return h("span", { class: "badge verdict-neutral", title: "the gate judged outputs only (threshold 0)" }, "no speedup required");
  }
  const label = deployable === true ? "deployable" : deployable === false ? "not deployable" : "no verdict";
  const state = deployable === true ? "state-succeeded" : deployable === false ? "state-failed" : "";
  return h("span", { class: `badge ${state}` }, label);
}

// What the chosen row measured, in words: the mean speedup, its interval, and whether it was slower.
export function speedText(row) {
  if (!row || missing(row.speedup)) return null;
  const interval = missing(row.speedup_ci_low) ? "" : ` (95 % interval ${num(row.speedup_ci_low, 2)}–${num(row.speedup_ci_high, 2)})`;
  const slower = !missing(row.speedup_ci_high) && row.speedup_ci_high < 1 ? ": slower than without speculation" : "";
  return `measured ${num(row.speedup, 2)}×${interval}${slower}`;
}

function verdict(sweep) {
  const top = sweep.rows.find((row) => (row.config || row.depth !== null) && chosen(row, sweep));
  const label = sweep.chosenConfig !== null ? `chosen config ${sweep.chosenConfig}`
    : sweep.chosenDepth !== null ? `chosen depth ${sweep.chosenDepth}` : null;
  const neutral = sweep.deployable === true && sweep.speedupRequired === false;
  return h("div", { class: "verdict", id: "verdict" },
    verdictBadge(sweep),
    h("div", { class: "verdict-text" },
      label ? h("span", { class: "muted" }, label) : null,
      neutral ? h("p", { class: "verdict-note" },
        `This sweep asked for no speedup (threshold ${sweep.threshold ?? 0}): its gate judged outputs only.`,
        top && speedText(top) ? ` It ${speedText(top)}.` : "") : null,
      sweep.reasons.length ? h("ul", { class: "reasons" }, sweep.reasons.map((reason) => h("li", null, reason))) : null));
}

const ms = (value) => num(value, 1);

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

function speedBar(label, value, top, kind) {
  const width = top > 0 && !missing(value) ? `${Math.max(2, (100 * value) / top)}%` : "0";
  return h("div", { class: `figure-bar figure-bar-${kind}` },
    h("span", { class: "figure-bar-label" }, label),
    h("span", { class: "figure-bar-track" }, h("span", { class: "figure-bar-fill", style: { width } })),
    h("span", { class: "figure-bar-value" }, missing(value) ? "—" : `${num(value, 1)} tok/s`));
}

function figureCard(row, baseline, sweep) {
  const top = Math.max(row.output_tok_s ?? 0, baseline?.output_tok_s ?? 0);
  const speed = missing(row.speedup) ? "—" : `${num(row.speedup, 2)}×`;
  const interval = missing(row.speedup_ci_low) ? "" : `95 % interval ${num(row.speedup_ci_low, 2)}–${num(row.speedup_ci_high, 2)}`;
  const slower = !missing(row.speedup_ci_high) && row.speedup_ci_high < 1;
  return h("div", { class: `figure-card${chosen(row, sweep) ? " figure-chosen" : ""}`, dataset: { config: configLabel(row) } },
    h("div", { class: "figure-head" }, h("b", null, `depth ${row.depth}`), h("span", { class: "mono muted" }, configLabel(row))),
    h("div", { class: "figure-numbers" },
      h("div", { class: "figure" }, h("span", { class: "figure-value" }, num(row.accept_len, 2)),
        h("span", { class: "figure-label" }, "accept length (tokens per verify step)")),
      h("div", { class: "figure" }, h("span", { class: `figure-value${slower ? " figure-slower" : ""}` }, speed),
        h("span", { class: "figure-label" }, [slower ? "slower than the baseline" : "speedup", interval ? ` · ${interval}` : ""]))),
    speedBar("speculative", row.output_tok_s, top, "spec"),
    speedBar("baseline", baseline?.output_tok_s, top, "base"));
}

function figureCards(sweep) {
  const baseline = sweep.rows.find((row) => row.depth === null && !row.config);
  const rows = sweep.rows.filter((row) => (row.config || row.depth !== null) && !row.rejected).sort(byConfig);
  return h("div", { class: "figures", id: "benchmark-figures" }, rows.map((row) => figureCard(row, baseline, sweep)));
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
    this.charts = [];
    // By depth means chains: a tree of the same steps would share its x (it is in the table).
    const chains = sweep.rows.filter((row) => (row.topk ?? 1) === 1);
    const measured = chains.filter((row) => row.depth !== null && !missing(row.accept_len));
    if (measured.length < 2) {
      // A line through one point says nothing: one card per config, its figures against the baseline's.
      replace(this.body, verdict(sweep), figureCards(sweep), benchmarkTable(sweep.rows, sweep));
      this.root.hidden = false;
      return;
    }
    const grid = h("div", { class: "chart-grid" });
    replace(this.body, verdict(sweep), grid, benchmarkTable(sweep.rows, sweep));
    this.root.hidden = false;
    const accept = new DepthChart(grid, { title: "Acceptance length by depth", yLabel: "tokens / verify step", seriesLabel: "accept len" });
    const speed = new DepthChart(grid, { title: "Output tokens/s by depth", yLabel: "tok/s", seriesLabel: "output tok/s" });
    accept.update(chains.map((row) => ({ depth: row.depth, value: row.accept_len ?? null })));
    speed.update(chains.map((row) => ({ depth: row.depth, value: row.output_tok_s ?? null })));
    this.charts = [accept, speed];
  }

  destroy() {
    this.charts.forEach((chart) => chart.destroy());
  }
}
