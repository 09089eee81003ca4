// A job's log on screen: the last lines first, then live lines from the SSE stream, appended once per
// animation frame and scrolled into view while the reader is at the bottom. Text goes in as text nodes.

import { getJson } from "./api.js";
import { ansiSegments } from "./ansi.js";
import { h } from "./dom.js";
import { followSse } from "./sse.js";

const TAIL_LINES = 1000;
const EARLIER_LINES = 1000;
const MAX_DOM_LINES = 20000; // past this the oldest lines leave the page (the API still has them)
const AT_BOTTOM_PX = 24;

function lineElement(line) {
  const row = h("div", { class: line.stream === "stderr" ? "log-line log-stderr" : "log-line", dataset: { seq: line.seq } });
  row.append(h("span", { class: "log-seq" }, String(line.seq)));
  const text = h("span", { class: "log-text" });
  for (const segment of ansiSegments(line.text)) {
    text.append(segment.className ? h("span", { class: segment.className }, segment.text) : document.createTextNode(segment.text));
  }
  row.append(text);
  return row;
}

export class LogView {
  constructor(container, jobId, { onEnd } = {}) {
    this.jobId = jobId;
    this.onEnd = onEnd || (() => {});
    this.pending = [];
    this.frame = null;
    this.lastSeq = 0;
    this.firstSeq = null;
    this.follow = true;
    this.status = h("span", { class: "log-status", id: "log-status" }, "loading…");
    this.count = h("span", { class: "muted", id: "log-count" });
    this.earlier = h("button", { type: "button", class: "btn btn-small", hidden: true, onclick: () => this.loadEarlier() }, "Load earlier lines");
    this.followBox = h("input", { type: "checkbox", checked: true, onchange: (e) => this.setFollow(e.target.checked) });
    this.box = h("div", { class: "log", id: "log", tabindex: 0 });
    this.box.addEventListener("scroll", () => this.onScroll());
    container.append(
      h("div", { class: "log-toolbar" }, this.status, this.count, this.earlier,
        h("label", { class: "log-follow" }, this.followBox, " follow")),
      this.box,
    );
  }

  async start() {
    const page = await getJson(`/v1/jobs/${this.jobId}/logs?tail=${TAIL_LINES}`);
    this.enqueue(page.lines);
    this.lastSeq = Math.max(this.lastSeq, page.next_cursor);
    if (page.complete) return this.ended(page.job_state);
    this.stream = followSse(`/v1/jobs/${this.jobId}/logs/stream?cursor=${this.lastSeq}`, {
      onEvent: (event) => this.onEvent(event),
      onStatus: (status, detail) => this.onStreamStatus(status, detail),
    });
    return undefined;
  }

  onEvent(event) {
    const data = JSON.parse(event.data);
    if (event.type === "line") this.enqueue([data]);
    else if (event.type === "end") this.ended(data.state);
  }

  onStreamStatus(status, detail) {
    if (status === "open") this.status.textContent = "following live";
    else if (status === "retrying") this.status.textContent = `reconnecting (${detail})…`;
    else if (status === "failed") this.status.textContent = detail;
  }

  ended(state) {
    this.status.textContent = `log complete · job ${state}`;
    this.status.classList.add("log-ended");
    this.onEnd(state);
  }

  enqueue(lines) {
    for (const line of lines) {
      if (line.seq <= this.lastSeq && this.firstSeq !== null) continue; // a replay after a reconnect
      this.pending.push(line);
      this.lastSeq = Math.max(this.lastSeq, line.seq);
      if (this.firstSeq === null || line.seq < this.firstSeq) this.firstSeq = line.seq;
    }
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.frame = null;
    const fragment = document.createDocumentFragment();
    for (const line of this.pending.splice(0)) fragment.append(lineElement(line));
    this.box.append(fragment);
    while (this.box.childElementCount > MAX_DOM_LINES) this.box.firstElementChild.remove();
    this.firstSeq = Number(this.box.firstElementChild?.dataset.seq ?? this.firstSeq);
    this.updateCount();
    if (this.follow) this.box.scrollTop = this.box.scrollHeight;
  }

  updateCount() {
    const shown = this.box.childElementCount;
    this.count.textContent = `${shown.toLocaleString()} line${shown === 1 ? "" : "s"}`;
    this.earlier.hidden = !(this.firstSeq > 1);
  }

  async loadEarlier() {
    const before = this.firstSeq - 1;
    const cursor = Math.max(0, before - EARLIER_LINES);
    const page = await getJson(`/v1/jobs/${this.jobId}/logs?cursor=${cursor}&limit=${before - cursor}`);
    const lines = page.lines.filter((line) => line.seq < this.firstSeq);
    const height = this.box.scrollHeight;
    const fragment = document.createDocumentFragment();
    for (const line of lines) fragment.append(lineElement(line));
    this.box.prepend(fragment);
    this.box.scrollTop += this.box.scrollHeight - height; // keep the line the reader was looking at in place
    this.firstSeq = cursor + 1;
    this.updateCount();
  }

  onScroll() {
    const atBottom = this.box.scrollHeight - this.box.scrollTop - this.box.clientHeight < AT_BOTTOM_PX;
    if (atBottom !== this.follow) this.setFollow(atBottom);
  }

  setFollow(on) {
    this.follow = on;
    this.followBox.checked = on;
    if (on) this.box.scrollTop = this.box.scrollHeight;
  }

  destroy() {
    this.stream?.close();
    if (this.frame) cancelAnimationFrame(this.frame);
  }
}
