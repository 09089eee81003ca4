// Inference servers started by launch jobs (state, URL, GPUs, draft, last acceptance length) with a stop
// button, the latest benchmark verdicts, and two of them compared draft against draft.

import { getOptional, postJson } from "../api.js";
import { chosen, configLabel, readSweep, verdictBadge } from "../benchmark.js";
import { Comparison } from "../compare.js";
import { ago, h, jobLink, notice, num, replace, shortId, stateBadge, table, timeTitle } from "../dom.js";
import { poll } from "../live.js";

const LIVE = new Set(["starting", "ready"]);

async function stopServer(server, button) {
  if (!window.confirm(`Stop the ${server.engine || ""} server ${shortId(server.id)} on ${server.host}?`)) return;
  button.disabled = true;
  button.textContent = "Stopping…";
  try {
    await postJson(`/v1/servers/${server.id}/stop`);
  } catch (error) {
    button.disabled = false;
    button.textContent = "Stop";
    window.alert(`Stop failed: ${error.message}`);
  }
}

function serverRow(server) {
  const stop = h("button", { type: "button", class: "btn btn-danger btn-small", dataset: { stop: server.id } }, "Stop");
  stop.addEventListener("click", () => stopServer(server, stop));
  return h("tr", { dataset: { serverId: server.id } },
    h("td", { class: "mono", title: server.id }, shortId(server.id)),
    h("td", null, stateBadge(server.state)),
    h("td", null, server.engine || "—"),
    h("td", null, server.host || "—"),
    h("td", { class: "mono" }, server.url || "—"),
    h("td", null, server.gpus?.length ? server.gpus.join(", ") : "—"),
    h("td", { class: "cell-path", title: server.draft || "" }, server.draft || "—"),
    h("td", null, num(server.last_accept_len, 2)),
    h("td", { title: timeTitle(server.ready_at || server.started_at) }, ago(server.ready_at || server.started_at)),
    h("td", null, jobLink(server.job_id)),
    h("td", { class: "cell-message", title: server.message || "" }, server.message || ""),
    h("td", null, LIVE.has(server.state) ? stop : null));
}

// The gate's chosen row by its config label ("5,2,8" and "5,1,6" share a depth), else the fastest.
function chosenRow(sweep) {
  const speculative = sweep.rows.filter((row) => row.depth !== null || row.config);
  if (sweep.chosenConfig !== null || sweep.chosenDepth !== null) {
    return speculative.find((row) => chosen(row, sweep)) || null;
  }
  return speculative.sort((a, b) => (b.speedup ?? 0) - (a.speedup ?? 0))[0] || null;
}

function benchmarkRow(result, comparison) {
  const sweep = readSweep(result.summary, result.deployable);
  const top = chosenRow(sweep);
  return h("tr", { dataset: { benchmarkId: result.id } },
    h("td", null, comparison.checkbox(result.id)),
    h("td", null, jobLink(result.job_id)),
    h("td", { class: "mono" }, result.server_id ? shortId(result.server_id) : "—"),
    h("td", null, verdictBadge(sweep.deployable)),
    h("td", { class: "mono" }, top ? configLabel(top) : "—"),
    h("td", null, top?.speedup ? `${num(top.speedup, 2)}×` : "—"),
    h("td", null, top ? num(top.accept_len, 2) : "—"),
    h("td", null, top ? num(top.output_tok_s, 0) : "—"),
    h("td", { class: "cell-message", title: sweep.reasons.join("\n") }, sweep.reasons.join("; ")),
    h("td", { title: timeTitle(result.created_at) }, ago(result.created_at)));
}

export function mount(root) {
  const servers = h("div", { class: "table-wrap", id: "servers" });
  const benchmarks = h("div", { class: "table-wrap", id: "benchmarks" });
  const comparison = new Comparison();
  root.append(
    h("div", { class: "page-head" }, h("h1", null, "Servers")),
    h("section", { class: "panel" }, servers),
    h("section", { class: "panel" }, h("h2", { class: "panel-title" }, "Benchmarks"), benchmarks),
    h("section", { class: "panel" }, h("h2", { class: "panel-title" }, "Two drafts, paired by prompt"), comparison.panel),
  );
  return poll(async () => {
    const [serverList, benchmarkList] = await Promise.all([getOptional("/v1/servers"), getOptional("/v1/benchmarks")]);
    if (!serverList.available) replace(servers, notice("This API has no /v1/servers yet (an older eyas)."));
    else if (!serverList.data.items.length) replace(servers, h("p", { class: "empty" }, "No servers. A launch job starts one."));
    else {
      const headers = ["server", "state", "engine", "host", "url", "GPUs", "draft", "accept len", "up since", "job", "message", ""];
      replace(servers, table(headers, serverList.data.items.map(serverRow), { id: "servers-table" }));
    }
    if (!benchmarkList.available) replace(benchmarks, notice("This API has no /v1/benchmarks yet."));
    else if (!benchmarkList.data.items.length) replace(benchmarks, h("p", { class: "empty" }, "No benchmarks yet."));
    else {
      const headers = ["compare", "job", "server", "verdict", "config", "speedup", "accept len", "tok/s", "reasons", "when"];
      const rows = benchmarkList.data.items.map((result) => benchmarkRow(result, comparison));
      replace(benchmarks, table(headers, rows, { id: "benchmarks-table" }));
    }
  });
}
