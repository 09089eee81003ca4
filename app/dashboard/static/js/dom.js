// Building the page from data without parsing HTML: every string becomes a text node, so text from the API
// (log lines, messages, params) can never become markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "style") Object.assign(el.style, value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

export function shortId(id) {
  return id ? String(id).slice(0, 8) : "—";
}

export function link(href, text, attrs = {}) {
  return h("a", { href, ...attrs }, text);
}

export function jobLink(id) {
  return id ? link(`#/jobs/${id}`, shortId(id), { class: "mono", title: id }) : "—";
}

export function stateBadge(state) {
  const value = state || "unknown";
  return h("span", { class: `badge state-${value.replace(/[^a-z_]/g, "")}` }, value);
}

export function progressBar(fraction, label) {
  const pct = fraction === null || fraction === undefined ? null : Math.max(0, Math.min(1, fraction)) * 100;
  return h(
    "div",
    { class: "bar", title: label || (pct === null ? "" : `${pct.toFixed(0)}%`) },
    h("div", { class: "bar-fill", style: { width: `${pct ?? 0}%` } }),
    h("span", { class: "bar-label" }, label ?? (pct === null ? "" : `${pct.toFixed(0)}%`)),
  );
}

// A job's progress: the percentage, and what the stage said about it ("epoch 2/5 · step 370").
export function jobProgress(job) {
  const fraction = job.progress ?? (job.state === "succeeded" ? 1 : null);
  if (fraction === null) return "";
  const pct = `${Math.round(fraction * 100)}%`;
  return progressBar(fraction, job.progress_message ? `${pct} · ${job.progress_message}` : pct);
}

export function reasonText(job) {
  return [job.termination_reason, job.message].filter(Boolean).join(": ");
}

export function meter(used, total, text, warnAt = 0.9) {
  const fraction = total > 0 ? used / total : 0;
  const bar = progressBar(fraction, text);
  if (fraction >= warnAt) bar.classList.add("bar-hot");
  return bar;
}

export function ago(iso) {
  if (!iso) return "—";
  const seconds = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 0) return "now";
  return `${duration(seconds)} ago`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

export function between(startIso, endIso) {
  if (!startIso) return null;
  const end = endIso ? Date.parse(endIso) : Date.now();
  return (end - Date.parse(startIso)) / 1000;
}

export function timeTitle(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

export function num(value, digits = 2) {
  if (value === null || value === undefined || Number.isNaN(value)) return "—";
  return Number(value).toLocaleString(undefined, { maximumFractionDigits: digits });
}

export function mib(value) {
  if (value === null || value === undefined) return "—";
  return value >= 1024 ? `${(value / 1024).toFixed(1)} GiB` : `${Math.round(value)} MiB`;
}

export function table(headers, rows, attrs = {}) {
  return h(
    "table",
    { class: "table", ...attrs },
    h("thead", null, h("tr", null, headers.map((name) => h("th", null, name)))),
    h("tbody", null, rows),
  );
}

export function notice(text, kind = "info") {
  return h("div", { class: `notice notice-${kind}` }, text);
}

export function section(title, ...children) {
  return h("section", { class: "panel" }, h("h2", { class: "panel-title" }, title), children);
}

export function json(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}
