// Charts drawn by uPlot (vendored under /dashboard/vendor/uplot, MIT): metrics by training step, and
// benchmark figures by speculative depth with the baseline as a dashed line.

import { h } from "./dom.js";

const PALETTE = ["#2f6fdb", "#e4572e", "#17a398", "#f3a712", "#8e44ad", "#5c946e", "#d1495b", "#00798c",
  "#6c757d", "#b56576", "#3d5a80", "#9c6644"];
const HEIGHT = 240;

function cssVar(name, fallback) {
  const value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return value || fallback;
}

// Tick labels that stay readable from 3e-5 (a learning rate) to 41,000 (tokens/s).
export function formatValue(value) {
  if (value === null || value === undefined) return "—";
  const size = Math.abs(value);
  if (size !== 0 && (size < 1e-3 || size >= 1e6)) return value.toExponential(1);
  if (size >= 1000) return value.toLocaleString(undefined, { maximumFractionDigits: 0 });
  return String(Number(value.toPrecision(4)));
}

function axis(label, { values = true } = {}) {
  const stroke = cssVar("--fg-muted", "#666");
  const grid = cssVar("--grid", "#eee");
  const spec = { label, stroke, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
  if (values) spec.values = (u, ticks) => ticks.map(formatValue);
  return spec;
}

// train/acc_2, val/acc_2 and held_out/acc_2 share a colour (position 2), the split's validation dashed and
// the held-out set's dotted; a chart of one kind of series (train/loss, val/loss) gives each its own colour.
const DASHES = { "val/": [5, 4], "held_out/": [2, 3] };
const SPLIT_LINE = { train: "solid", val: "dashed", held_out: "dotted" };
const SPLIT_ORDER = ["train", "train_epoch", "val", "eval", "held_out"];
const keyOf = (name) => name.replace(/^(train_epoch|train|val|eval|held_out)\//, "");
const splitOf = (name) => name.match(/^(train_epoch|train|val|eval|held_out)\//)?.[1] || "train";
function seriesStyles(names) {
  const keys = [...new Set(names.map(keyOf))].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
  const byKey = keys.length > 1;
  const dashOf = (name) => Object.entries(DASHES).find(([prefix]) => name.startsWith(prefix))?.[1];
  return names.map((name, i) => ({
    stroke: PALETTE[(byKey ? keys.indexOf(keyOf(name)) : i) % PALETTE.length],
    dash: byKey ? dashOf(name) : undefined,
  }));
}

// Instead of one legend entry per series (30 of them outgrow the plot): one swatch per colour (the metric:
// a TTT position, a depth) and one line sample per line style (the split).
function compactKey(names, styles) {
  const colours = new Map();
  names.forEach((name, i) => colours.set(keyOf(name), styles[i].stroke));
  const keys = [...colours.keys()].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
  const splits = SPLIT_ORDER.filter((split) => names.some((name) => splitOf(name) === split));
  return h("div", { class: "chart-key" },
    h("span", { class: "chart-key-group" }, keys.map((key) => h("span", { class: "chart-key-item", dataset: { key } },
      h("span", { class: "chart-key-swatch", style: { background: colours.get(key) } }), key))),
    h("span", { class: "chart-key-group" }, splits.map((split) => h("span", { class: "chart-key-item", dataset: { split } },
      h("span", { class: "chart-key-line", style: { borderTopStyle: SPLIT_LINE[split] || "solid" } }), split))));
}

function lastValueIndex(column) {
  for (let i = column.length - 1; i >= 0; i -= 1) if (column[i] !== null && column[i] !== undefined) return i;
  return null;
}

// Without the cursor on the chart, the legend shows each series' newest value rather than "--".
function showLatest(plot) {
  if (plot.cursor.left >= 0) return;
  const idxs = plot.data.map((column, i) => (i === 0 ? column.length - 1 : lastValueIndex(column)));
  plot.setLegend({ idxs });
}

// Hovering a step where a sparse series (val/loss) has no point shows its nearest point. (Fresh objects per
// chart: uPlot writes into its options.)
const cursorOptions = () => ({ hover: { skip: [null, undefined] } });
const hooks = () => ({ ready: [showLatest], setCursor: [showLatest] });

function widthOf(container) {
  return Math.max(280, container.clientWidth || 600);
}

// Re-size with the container; uPlot draws on a canvas of fixed size.
function followWidth(container, getPlot) {
  const observer = new ResizeObserver(() => {
    const plot = getPlot();
    if (plot && Math.abs(plot.width - widthOf(container)) > 2) plot.setSize({ width: widthOf(container), height: HEIGHT });
  });
  observer.observe(container);
  return observer;
}

// Align series that report at different steps (train loss every step, val loss every epoch) on one x axis.
function alignByStep(seriesByName) {
  const names = [...seriesByName.keys()].sort();
  const steps = [...new Set(names.flatMap((name) => seriesByName.get(name).map(([step]) => step)))].sort((a, b) => a - b);
  const index = new Map(steps.map((step, i) => [step, i]));
  const columns = names.map((name) => {
    const column = new Array(steps.length).fill(null);
    for (const [step, value] of seriesByName.get(name)) column[index.get(step)] = value;
    return column;
  });
  return { names, data: [steps, ...columns] };
}

export class StepChart {
  constructor(container, { title, yLabel, compactKey: compact = false }) {
    this.box = h("div", { class: "chart" });
    container.append(this.box);
    this.title = title;
    this.yLabel = yLabel;
    this.compact = compact;
    this.names = "";
    this.plot = null;
    this.observer = followWidth(this.box, () => this.plot);
  }

  update(seriesByName) {
    const { names, data } = alignByStep(seriesByName);
    const key = names.join("\n");
    if (this.plot && key === this.names) {
      this.plot.setData(data);
      showLatest(this.plot);
      return;
    }
    this.plot?.destroy();
    this.key?.remove();
    this.names = key;
    this.box.dataset.series = String(names.length);
    const sparse = (i) => data[i + 1].filter((v) => v !== null).length < 60;
    const styles = seriesStyles(names);
    const series = names.map((name, i) => ({
      label: name,
      ...styles[i],
      width: 1.5,
      spanGaps: true,
      points: { show: sparse(i), size: 4 },
      value: (u, v) => formatValue(v),
    }));
    const options = {
      title: this.title,
      width: widthOf(this.box),
      height: HEIGHT,
      scales: { x: { time: false } },
      axes: [axis("step", { values: false }), axis(this.yLabel)],
      series: [{ label: "step" }, ...series],
      cursor: cursorOptions(),
      hooks: hooks(),
      legend: { show: !this.compact },
    };
    this.plot = new uPlot(options, data, this.box);
    this.key = this.compact ? compactKey(names, styles) : null;
    if (this.key) this.box.append(this.key);
  }

  destroy() {
    this.observer.disconnect();
    this.plot?.destroy();
  }
}

// rows: [{depth, value}] with depth null for the baseline (no speculative decoding).
export class DepthChart {
  constructor(container, { title, yLabel, seriesLabel }) {
    this.box = h("div", { class: "chart" });
    container.append(this.box);
    Object.assign(this, { title, yLabel, seriesLabel, plot: null });
    this.observer = followWidth(this.box, () => this.plot);
  }

  update(rows) {
    const points = rows.filter((row) => row.depth !== null && row.value !== null).sort((a, b) => a.depth - b.depth);
    const baseline = rows.find((row) => row.depth === null && row.value !== null);
    const depths = points.map((row) => row.depth);
    this.plot?.destroy();
    this.plot = null;
    if (!depths.length) return; // a baseline alone has nothing to compare
    const data = [depths, points.map((row) => row.value)];
    const series = [{ label: "depth" }, { label: this.seriesLabel, stroke: PALETTE[0], width: 2, points: { size: 7 } }];
    if (baseline) {
      data.push(depths.map(() => baseline.value));
      series.push({ label: "baseline", stroke: PALETTE[1], width: 1.5, dash: [6, 4], points: { show: false } });
    }
    const options = {
      title: this.title,
      width: widthOf(this.box),
      height: HEIGHT,
      scales: {
        x: { time: false, range: (u, min, max) => [min - 1, max + 1] }, // room for the end points
        y: { range: (u, min, max) => [0, Math.max(max * 1.15, 1)] },
      },
      axes: [{ ...axis("speculative depth", { values: false }), splits: () => depths }, axis(this.yLabel)],
      series,
      cursor: cursorOptions(),
      hooks: hooks(),
    };
    this.plot = new uPlot(options, data, this.box);
  }

  destroy() {
    this.observer.disconnect();
    this.plot?.destroy();
  }
}
