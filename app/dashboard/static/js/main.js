// The single-page app: a token gate, then hash routes (#/jobs, #/jobs/ID, #/pipelines[/ID], #/hosts,
// #/servers), each page a module whose mount(root, params) returns its unmount function.

import { ApiError, getJson, token, UNAUTHORIZED_EVENT } from "./api.js";
import { h, replace } from "./dom.js";
import * as hosts from "./pages/hosts.js";
import * as job from "./pages/job.js";
import * as jobs from "./pages/jobs.js";
import * as pipelines from "./pages/pipelines.js";
import * as servers from "./pages/servers.js";

const ROUTES = [
  [/^#\/jobs\/([0-9a-f-]{36})$/, job.mount, "jobs"],
  [/^#\/pipelines\/([0-9a-f-]{36})$/, pipelines.mountOne, "pipelines"],
  [/^#\/pipelines$/, pipelines.mount, "pipelines"],
  [/^#\/hosts$/, hosts.mount, "hosts"],
  [/^#\/servers$/, servers.mount, "servers"],
  [/^#\/jobs$/, jobs.mount, "jobs"],
];

const root = () => document.getElementById("app");
let unmount = null;

function leavePage() {
  if (unmount) unmount();
  unmount = null;
}

function route() {
  leavePage();
  if (!token.get()) return showTokenForm();
  document.getElementById("sign-out").hidden = false;
  document.getElementById("live").hidden = false;
  const hash = location.hash || "#/jobs";
  const match = ROUTES.map(([pattern, mount, nav]) => [hash.match(pattern), mount, nav]).find(([m]) => m);
  if (!match) {
    location.replace("#/jobs");
    return undefined;
  }
  const [groups, mount, nav] = match;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.route === nav);
  const container = replace(root(), h("div", { class: "page", dataset: { page: nav } }));
  unmount = mount(container.firstChild, { id: groups[1] }) || null;
  return undefined;
}

async function tryToken(secret) {
  token.set(secret);
  try {
    await getJson("/v1/hosts");
    return null;
  } catch (error) {
    token.clear();
    if (error instanceof ApiError && error.status === 401) return "This token was not accepted.";
    if (error instanceof ApiError && error.status === 403) return "This token lacks the read scope.";
    return `The API did not answer: ${error.message}`;
  }
}

function showTokenForm(message) {
  const shown = document.getElementById("token-error");
  if (shown) {
    shown.textContent = message || ""; // several pollers may report the same 401: keep what was typed
    return;
  }
  leavePage();
  document.getElementById("sign-out").hidden = true;
  document.getElementById("live").hidden = true;
  const input = h("input", {
    type: "password", id: "token-input", name: "token", autocomplete: "off", placeholder: "eyas_…", required: true,
  });
  const error = h("p", { class: "form-error", id: "token-error" }, message || "");
  const form = h(
    "form",
    { class: "token-form", id: "token-form" },
    h("h1", null, "Connect to eyas"),
    h("p", { class: "muted" }, "Paste an API token (read scope is enough to watch; submit to cancel or stop). ",
      "It is kept in this browser tab only (sessionStorage) and sent as a bearer header."),
    h("label", { for: "token-input" }, "Token"),
    input,
    h("button", { type: "submit", class: "btn btn-primary" }, "Connect"),
    error,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "Checking…";
    const problem = await tryToken(input.value);
    if (problem) error.textContent = problem;
    else route();
  });
  replace(root(), form);
  input.focus();
}

window.addEventListener(UNAUTHORIZED_EVENT, () => {
  token.clear();
  showTokenForm("The API rejected the token (revoked or expired). Enter a new one.");
});
window.addEventListener("hashchange", route);
document.getElementById("sign-out").addEventListener("click", () => {
  token.clear();
  showTokenForm();
});
route();
