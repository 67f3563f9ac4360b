// This browser's camera as a stream source: getUserMedia -> canvas at the camera's size (long side at most 640, the
// server's picture) -> JPEG -> WS ingest. The server learns at a size of its own.
import { wsUrl } from "./api.js";

const MAX_BUFFERED = 512 * 1024; // bytes queued on the socket before frames are skipped instead of piling up
const LONG_SIDE = 640;
const DEFAULT_FPS = 10; // the server's rate for a source that does not say its own

export class WebcamPump {
  /** Starts capturing; resolves once the camera is open (rejects with a readable Error if it cannot be). */
  static async start(streamId, { fps }, onStatus) {
    if (!navigator.mediaDevices?.getUserMedia) throw new Error("this browser cannot share its camera here (needs https or localhost)");
    let media;
    try {
      media = await navigator.mediaDevices.getUserMedia({ video: { width: { ideal: LONG_SIDE }, height: { ideal: 480 } }, audio: false });
    } catch (err) {
      throw new Error(`camera unavailable: ${err.message || err.name}`);
    }
    return new WebcamPump(streamId, media, fps || DEFAULT_FPS, onStatus);
  }

  constructor(streamId, media, fps, onStatus) {
    this.streamId = streamId;
    this.media = media;
    this.onStatus = onStatus || (() => {});
    this.sent = 0;
    this.skipped = 0;
    this.video = Object.assign(document.createElement("video"), { muted: true, playsInline: true, srcObject: media });
    this.video.play();
    this.canvas = document.createElement("canvas");
    this.ws = new WebSocket(wsUrl(`/ws/streams/${encodeURIComponent(streamId)}/ingest`));
    this.ws.onclose = (ev) => {
      if (!this.stopped) this.onStatus(`webcam upload closed${ev.reason ? `: ${ev.reason}` : ""}`);
      this.stop();
    };
    this.timer = setInterval(() => this.tick(), 1000 / fps);
  }

  tick() {
    if (this.ws.readyState !== WebSocket.OPEN || this.video.readyState < 2 || this.busy) return;
    if (this.ws.bufferedAmount > MAX_BUFFERED) {
      this.skipped += 1;
      return;
    }
    this.busy = true;
    const { canvas, video } = this;
    // The camera's own picture, its aspect kept, no larger than the server shows it.
    const scale = Math.min(1, LONG_SIDE / Math.max(video.videoWidth, video.videoHeight));
    canvas.width = Math.round((video.videoWidth * scale) / 2) * 2;
    canvas.height = Math.round((video.videoHeight * scale) / 2) * 2;
    canvas.getContext("2d").drawImage(video, 0, 0, canvas.width, canvas.height);
    canvas.toBlob(
      (blob) => {
        this.busy = false;
        if (blob && this.ws.readyState === WebSocket.OPEN) {
          this.ws.send(blob);
          this.sent += 1;
          this.onStatus(`webcam: ${this.sent} frames sent${this.skipped ? `, ${this.skipped} skipped (slow upload)` : ""}`);
        }
      },
      "image/jpeg",
      0.85,
    );
  }

  stop() {
    this.stopped = true;
    clearInterval(this.timer);
    this.media.getTracks().forEach((t) => t.stop());
    if (this.ws.readyState <= WebSocket.OPEN) this.ws.close(1000, "webcam stopped");
  }
}
