// Polling that is kind to the API: one request in flight per poller, nothing while the tab is hidden, and
// the top-bar dot says whether the last refresh worked.

import { ApiError } from "./api.js";

const POLL_MS = 2000;

function setLive(ok, detail) {
  const dot = document.getElementById("live");
  if (!dot) return;
  dot.className = ok ? "live live-ok" : "live live-error";
  dot.textContent = ok ? `live · ${new Date().toLocaleTimeString()}` : "offline";
  dot.title = detail || "";
}

// Call `tick` now and then every `intervalMs` after the previous call finished; stop() ends it. `tick`
// gets stop too: a page whose subject is gone (a 404) stops asking, and the API that answered is not offline.
export function poll(tick, intervalMs = POLL_MS) {
  let stopped = false;
  let timer = null;
  const stop = () => {
    stopped = true;
    if (timer !== null) clearTimeout(timer);
    document.removeEventListener("visibilitychange", wake);
  };

  async function run() {
    timer = null;
    if (stopped) return;
    if (!document.hidden) {
      try {
        await tick(stop);
        setLive(true);
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 401)) setLive(false, error.message);
        console.warn("refresh failed:", error.message);
      }
    }
    if (!stopped) timer = setTimeout(run, intervalMs);
  }

  function wake() {
    if (!document.hidden && timer !== null) {
      clearTimeout(timer);
      run();
    }
  }
  document.addEventListener("visibilitychange", wake);
  run();
  return stop;
}
