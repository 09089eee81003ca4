// Server-Sent Events over fetch(): EventSource cannot send an Authorization header, and a token in the URL
// would end up in access logs. The parser follows the SSE format (event/data/id/retry fields, blank line
// dispatches, comments ignored); after a dropped connection it resumes with Last-Event-ID, so no line is
// lost or repeated.

import { authHeaders, UNAUTHORIZED_EVENT } from "./api.js";

export class SseParser {
  constructor(onMessage) {
    this.onMessage = onMessage;
    this.buffer = "";
    this.reset();
    this.lastEventId = null;
    this.retryMs = null;
  }

  reset() {
    this.eventType = "";
    this.data = [];
    this.eventId = null;
  }

  push(chunk) {
    this.buffer += chunk;
    const lines = this.buffer.split(/\r\n|\r|\n/);
    // The last piece may be half a line; a lone trailing \r may be half of \r\n, so keep it too.
    this.buffer = lines.pop();
    for (const line of lines) this.line(line);
  }

  line(line) {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.eventType = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\0")) this.eventId = value;
    else if (field === "retry" && /^\d+$/.test(value)) this.retryMs = Number(value);
    return undefined;
  }

  dispatch() {
    if (this.eventId !== null) this.lastEventId = this.eventId;
    if (this.data.length > 0) {
      this.onMessage({ type: this.eventType || "message", data: this.data.join("\n"), id: this.lastEventId });
    }
    this.reset();
  }
}

// Follow `url` until an event of type `endEvent` arrives or close() is called. Handlers: onEvent({type,
// data, id}), onStatus("open" | "retrying" | "closed", detail).
export function followSse(url, { onEvent, onStatus = () => {}, endEvent = "end", lastEventId = null }) {
  const controller = new AbortController();
  let finished = false;
  let resumeFrom = lastEventId;

  async function connectOnce() {
    const extra = { Accept: "text/event-stream" };
    if (resumeFrom !== null) extra["Last-Event-ID"] = resumeFrom;
    const response = await fetch(url, { headers: authHeaders(extra), signal: controller.signal, cache: "no-store" });
    if (response.status === 401) window.dispatchEvent(new CustomEvent(UNAUTHORIZED_EVENT));
    if (response.status >= 400 && response.status < 500 && response.status !== 429) {
      finished = true; // no such job, or no access: retrying cannot help
      onStatus("failed", `stream answered HTTP ${response.status}`);
      return null;
    }
    if (!response.ok || !response.body) throw new Error(`stream answered HTTP ${response.status}`);
    onStatus("open");
    const parser = new SseParser((event) => {
      if (event.id !== null) resumeFrom = event.id;
      onEvent(event);
      if (event.type === endEvent) finished = true;
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    while (!finished) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.push(value);
    }
    if (finished) await reader.cancel().catch(() => {});
    return parser.retryMs;
  }

  (async () => {
    let delayMs = 1000;
    while (!finished && !controller.signal.aborted) {
      try {
        delayMs = (await connectOnce()) ?? delayMs;
      } catch (error) {
        if (controller.signal.aborted) break;
        onStatus("retrying", error.message);
      }
      if (finished || controller.signal.aborted) break;
      await new Promise((resolve) => setTimeout(resolve, delayMs));
    }
    onStatus("closed");
  })();

  return {
    close() {
      finished = true;
      controller.abort();
    },
  };
}
