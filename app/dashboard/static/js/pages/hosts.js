// Hosts: the roots job paths must lie under, and their GPUs: memory and utilisation bars, power and
// temperature, the processes on each GPU and which job leases it; /dev/shm free space and stale segments.

import { getJson } from "../api.js";
import { ago, h, jobLink, meter, mib, notice, num, replace, timeTitle } from "../dom.js";
import { poll } from "../live.js";

function processes(gpu) {
  const list = gpu.processes || [];
  if (!list.length) return h("span", { class: "muted" }, "no processes");
  return h("ul", { class: "procs" }, list.map((p) => h("li", null,
    h("span", { class: "mono" }, String(p.pid)), " ", p.name || "?", " ",
    h("span", { class: "muted" }, p.used_memory_mib === null ? "" : mib(p.used_memory_mib)))));
}

function gpuRow(gpu, lease) {
  const used = gpu.memory_used_mib;
  const total = gpu.memory_total_mib;
  const util = gpu.utilization_pct;
  return h("tr", { class: "gpu", dataset: { gpuIndex: gpu.index } },
    h("td", { class: "mono" }, String(gpu.index)),
    h("td", { title: gpu.uuid || "" }, gpu.name),
    h("td", { class: "cell-bar" }, meter(used, total, `${mib(used)} / ${mib(total)}`)),
    h("td", { class: "cell-bar" }, util === null || util === undefined ? "—" : meter(util, 100, `${Math.round(util)}%`, 2)),
    h("td", null, gpu.power_w === null || gpu.power_w === undefined ? "—" : `${num(gpu.power_w, 0)} W`),
    h("td", null, gpu.temperature_c === null || gpu.temperature_c === undefined ? "—" : `${num(gpu.temperature_c, 0)} °C`),
    h("td", null, lease ? h("span", null, "leased by ", jobLink(lease.job_id)) : h("span", { class: "muted" }, "free")),
    h("td", null, processes(gpu)));
}

function shmLine(shm) {
  if (!shm || !shm.total_mib) return null;
  const used = shm.total_mib - shm.free_mib;
  const stale = shm.stale_count
    ? h("span", { class: "warn" }, ` · ${shm.stale_count} stale segment(s), ${mib(shm.stale_mib)}`)
    : null;
  return h("div", { class: "shm" }, h("span", { class: "muted" }, `${shm.path || "/dev/shm"} `),
    meter(used, shm.total_mib, `${mib(used)} / ${mib(shm.total_mib)} used`), stale);
}

// Every path a job names (target, data, workdir, draft) must lie under one of these on the worker's host, or
// the job is refused with PATH_NOT_ALLOWED: the first thing a new pipeline runs into.
function rootsLine(host) {
  const roots = host.allowed_roots || [];
  if (!roots.length) {
    return notice("No allowed roots: every job that names a path is refused here. Start the worker with EYAS_ALLOWED_ROOTS (eyas up: --allow-root).", "warn");
  }
  return h("div", { class: "roots", dataset: { roots: roots.length } },
    h("span", { class: "muted", title: "paths in a job's params must lie under one of these (symlinks resolved)" }, "allowed roots "),
    roots.map((root) => h("code", { class: "root" }, root)),
    h("span", { class: "muted" }, " · job paths must lie under one of them"));
}

function hostCard(host) {
  const leases = new Map((host.leases || []).map((lease) => [lease.gpu_index, lease]));
  const gpus = host.gpus || [];
  return h("section", { class: "panel host", dataset: { host: host.name } },
    h("div", { class: "host-head" },
      h("span", { class: host.online ? "dot dot-on" : "dot dot-off", title: host.online ? "online" : "offline" }),
      h("h2", { class: "panel-title" }, host.name),
      h("span", { class: "muted", title: timeTitle(host.heartbeat_at) }, `${host.online ? "online" : "offline"} · heartbeat ${ago(host.heartbeat_at)}`),
      h("span", { class: "muted" }, ` · ${host.gpu_count} GPU${host.gpu_count === 1 ? "" : "s"} · ${leases.size} leased`)),
    rootsLine(host),
    host.gpu_error ? notice(`GPUs: ${host.gpu_error}`, "warn") : null,
    gpus.length
      ? h("table", { class: "table gpus" },
        h("thead", null, h("tr", null, ["GPU", "model", "memory", "utilisation", "power", "temp", "lease", "processes"].map((t) => h("th", null, t)))),
        h("tbody", null, gpus.map((gpu) => gpuRow(gpu, leases.get(gpu.index)))))
      : null,
    shmLine(host.shm));
}

export function mount(root) {
  const body = h("div", { id: "hosts" });
  root.append(h("div", { class: "page-head" }, h("h1", null, "Hosts")), body);
  return poll(async () => {
    const hosts = await getJson("/v1/hosts");
    if (!hosts.length) return replace(body, h("p", { class: "empty" }, "No host has registered. Start `eyas worker --host-name NAME`."));
    return replace(body, hosts.map(hostCard));
  });
}
