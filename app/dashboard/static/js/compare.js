// Two benchmarks picked in a list, compared on the requests both asked (GET /v1/benchmarks/compare): per
// config, each draft's accept length, a − b with its 95 % interval over prompts, the prompts each won, and
// the verdict. The pick survives the list's refreshes: the boxes are drawn from it.

import { getJson } from "./api.js";
import { h, notice, num, replace, table } from "./dom.js";

const signed = (value) => (value > 0 ? `+${num(value, 3)}` : num(value, 3));

function configRow(config) {
  return h("tr", { dataset: { config: config.config } },
    h("td", { class: "mono" }, config.config),
    h("td", null, num(config.a_accept_len, 3)),
    h("td", null, num(config.b_accept_len, 3)),
    h("td", null, signed(config.difference)),
    h("td", null, `${signed(config.ci_low)} … ${signed(config.ci_high)}`),
    h("td", null, `${config.a_ahead_prompts} / ${config.b_ahead_prompts} / ${config.tied_prompts}`),
    h("td", { class: "cell-message" }, config.verdict));
}

function side(name, benchmark) {
  return h("p", null, h("b", null, `${name}: `), h("span", { class: "mono" }, benchmark.draft || benchmark.url || benchmark.id));
}

function render(body) {
  const interval = `${Math.round(body.confidence * 100)} % interval`;
  const headers = ["config", "a", "b", "a − b", interval, "prompts a / b / tied", "verdict"];
  return [
    side("a", body.a),
    side("b", body.b),
    table(headers, body.configs.map(configRow), { id: "comparison-table" }),
    h("p", { class: "muted" }, `${body.prompts} prompts; ${body.interval}`),
    body.notes.map((text) => notice(text, "warn")),
  ];
}

export class Comparison {
  constructor() {
    this.picked = [];
    this.panel = h("div", { id: "comparison" }, h("p", { class: "muted" }, "Tick two benchmarks to compare their drafts."));
  }

  checkbox(id) {
    const box = h("input", { type: "checkbox", checked: this.picked.includes(id), dataset: { compare: id }, title: "compare (pick two)" });
    box.addEventListener("change", () => this.toggle(id, box.checked));
    return box;
  }

  async toggle(id, on) {
    const others = this.picked.filter((picked) => picked !== id);
    this.picked = on ? [...others, id].slice(-2) : others;
    for (const box of document.querySelectorAll("input[data-compare]")) box.checked = this.picked.includes(box.dataset.compare);
    if (this.picked.length < 2) {
      replace(this.panel, h("p", { class: "muted" }, this.picked.length ? "Tick one more." : "Tick two benchmarks to compare their drafts."));
      return;
    }
    const [a, b] = this.picked;
    const asked = (this.asked = (this.asked || 0) + 1); // a slower answer to an earlier pick must not win
    replace(this.panel, h("p", { class: "muted" }, "Comparing…"));
    let shown;
    try {
      shown = render(await getJson(`/v1/benchmarks/compare?a=${a}&b=${b}`));
    } catch (error) {
      shown = notice(`${error.code || "error"}: ${error.message}`, "error");
    }
    if (asked === this.asked) replace(this.panel, shown);
  }
}
