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

function axis(label) {
  const stroke = cssVar("--fg-muted", "#666");
  const grid = cssVar("--grid", "#eee");
  return { label, stroke, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
}

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
export function alignByStep(seriesByName) {
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
  constructor(container, { title, yLabel }) {
    this.box = h("div", { class: "chart" });
    container.append(this.box);
    this.title = title;
    this.yLabel = yLabel;
    this.names = "";
    this.plot = null;
    this.observer = followWidth(this.box, () => this.plot);
  }

  update(seriesByName) {
    const { names, data } = alignByStep(seriesByName);
    const key = names.join("\n");
    if (this.plot && key === this.names) {
      this.plot.setData(data);
      return;
    }
    this.plot?.destroy();
    this.names = key;
    const sparse = (i) => data[i + 1].filter((v) => v !== null).length < 60;
    const series = names.map((name, i) => ({
      label: name,
      stroke: PALETTE[i % PALETTE.length],
      width: 1.5,
      spanGaps: true,
      points: { show: sparse(i), size: 4 },
    }));
    const options = {
      title: this.title,
      width: widthOf(this.box),
      height: HEIGHT,
      scales: { x: { time: false } },
      axes: [axis("step"), axis(this.yLabel)],
      series: [{ label: "step" }, ...series],
    };
    this.plot = new uPlot(options, data, this.box);
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
    const data = [depths, points.map((row) => row.value)];
    const series = [{ label: "depth" }, { label: this.seriesLabel, stroke: PALETTE[0], width: 2, points: { size: 7 } }];
    if (baseline) {
      data.push(depths.map(() => baseline.value));
      series.push({ label: "baseline", stroke: PALETTE[1], width: 1.5, dash: [6, 4], points: { show: false } });
    }
    this.plot?.destroy();
    const options = {
      title: this.title,
      width: widthOf(this.box),
      height: HEIGHT,
      scales: { x: { time: false }, y: { range: (u, min, max) => [0, Math.max(max * 1.15, 1)] } },
      axes: [{ ...axis("speculative depth"), incrs: [1, 2, 4, 8, 16] }, axis(this.yLabel)],
      series,
    };
    this.plot = new uPlot(options, data, this.box);
  }

  destroy() {
    this.observer.disconnect();
    this.plot?.destroy();
  }
}
