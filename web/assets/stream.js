// A running execution's live output: Server-Sent Events read through fetch (so the token goes
// along), closed when the view changes.

import { TOKEN_KEY } from "./api.js";

/** The open live-output stream, closed when the view changes. */
let following = null;
export function stopFollowing() {
  if (following) following.abort();
  following = null;
}

/**
 * Follows `GET /api/executions/{id}/stream` (Server-Sent Events read through fetch, so the
 * session's token goes along) and calls `handlers[event](data)` for each event.
 */
export async function followOutput(id, handlers) {
  stopFollowing();
  const ctl = new AbortController();
  following = ctl;
  const headers = { "Accept": "text/event-stream" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = `Bearer ${token}`;
  const resp = await fetch(`/api/executions/${encodeURIComponent(id)}/stream`, { headers, signal: ctl.signal });
  if (!resp.ok || !resp.body) throw new Error(`stream: ${resp.status}`);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event = val;
        else if (field === "data") data.push(val);
      }
      if (!data.length || !handlers[event]) continue;
      try { handlers[event](JSON.parse(data.join("\n"))); } catch (e) { console.error(e); }
    }
  }
}
