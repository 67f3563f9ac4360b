// One stream's live WebSocket (WS /ws/streams/{id}): pairs each JSON metrics message with the binary image(s)
// that follow it, and reconnects with backoff when the connection drops (the stream itself may still be running).
import { askToken } from "./token.js";
import { wsUrl } from "./api.js";

const BACKOFF_S = [0.5, 1, 2, 4, 8];
const FINAL_STATES = new Set(["ended", "error", "deleted"]);

/**
 * Image layout of the binary messages after each metrics message. This client asks for ?images=frame,flow (it blends
 * them itself: opacity, side by side, arrows), and the server names the layout in each metrics message as
 * `"images": ["frame", "flow"]`; an unnamed layout is the server's default, ["overlay"] (frame and flow pre-blended).
 */
function layoutOf(msg, current) {
  return Array.isArray(msg.images) && msg.images.length ? msg.images : current;
}

export class LiveStream {
  /** handlers: onFrame({metrics, images: {kind: ImageBitmap}}), onStatus(msg), onConnection(state, detail) */
  constructor(id, handlers) {
    this.id = id;
    this.h = handlers;
    this.closed = false;
    this.attempt = 0;
    this.layout = ["overlay"];
    this.finalState = null;
    this.connect();
  }

  connect() {
    if (this.closed) return;
    this.h.onConnection?.(this.attempt ? "reconnecting" : "connecting", this.attempt);
    const ws = new WebSocket(wsUrl(`/ws/streams/${encodeURIComponent(this.id)}?images=frame,flow`));
    ws.binaryType = "blob";
    this.ws = ws;
    let metrics = null;
    let blobs = [];
    ws.onopen = () => {
      this.attempt = 0;
      this.h.onConnection?.("open", 0);
    };
    ws.onmessage = (ev) => {
      if (typeof ev.data === "string") {
        let msg;
        try {
          msg = JSON.parse(ev.data);
        } catch {
          return;
        }
        this.layout = layoutOf(msg, this.layout);
        if ("frame" in msg && "loss" in msg) {
          metrics = msg;
          blobs = [];
        } else {
          if (FINAL_STATES.has(msg.state)) this.finalState = msg.state;
          this.h.onStatus?.(msg);
        }
        return;
      }
      if (!metrics) return; // an image without its metrics (joined mid-pair): skip it
      blobs.push(ev.data);
      if (blobs.length >= this.layout.length) {
        this.deliver(metrics, blobs, this.layout);
        metrics = null;
        blobs = [];
      }
    };
    ws.onclose = (ev) => this.onClose(ev);
  }

  async deliver(metrics, blobs, layout) {
    // Decoding is async; a newer frame that finishes first wins and older ones are dropped.
    const seq = (this.seq = (this.seq || 0) + 1);
    let bitmaps;
    try {
      bitmaps = await Promise.all(blobs.map((b) => createImageBitmap(b)));
    } catch {
      this.h.onFrame?.({ metrics, images: {} });
      return;
    }
    if (this.closed || seq < (this.shown || 0)) {
      bitmaps.forEach((b) => b.close());
      return;
    }
    this.shown = seq;
    const images = Object.fromEntries(layout.map((kind, i) => [kind, bitmaps[i]]));
    this.h.onFrame?.({ metrics, images });
  }

  async onClose(ev) {
    if (this.closed) return;
    if (ev.code === 4401 || ev.code === 1008) {
      // Policy violation / unauthorised: ask for the token once, then try again.
      if (!(await askToken())) {
        this.h.onConnection?.("closed", "unauthorised: a valid token is needed");
        return;
      }
    } else if (ev.code === 4404 || this.finalState) {
      this.h.onConnection?.("closed", ev.reason || this.finalState || "stream not found");
      return;
    }
    const delay = BACKOFF_S[Math.min(this.attempt, BACKOFF_S.length - 1)];
    this.attempt += 1;
    this.h.onConnection?.("reconnecting", this.attempt);
    this.timer = setTimeout(() => this.connect(), delay * 1000);
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    this.ws?.close(1000, "viewer left");
  }
}
