// This browser's camera as a stream source: getUserMedia -> canvas at the stream's size -> JPEG -> WS ingest.
import { wsUrl } from "./api.js";

const MAX_BUFFERED = 256 * 1024; // bytes queued on the socket before frames are skipped instead of piling up

export class WebcamPump {
  /** Starts capturing; resolves once the camera is open (rejects with a readable Error if it cannot be). */
  static async start(streamId, { fps, width, height }, onStatus) {
    if (!navigator.mediaDevices?.getUserMedia) throw new Error("this browser cannot share its camera here (needs https or localhost)");
    let media;
    try {
      media = await navigator.mediaDevices.getUserMedia({ video: { width: { ideal: width * 2 }, height: { ideal: height * 2 } }, audio: false });
    } catch (err) {
      throw new Error(`camera unavailable: ${err.message || err.name}`);
    }
    return new WebcamPump(streamId, media, { fps, width, height }, onStatus);
  }

  constructor(streamId, media, { fps, width, height }, onStatus) {
    this.streamId = streamId;
    this.media = media;
    this.onStatus = onStatus || (() => {});
    this.sent = 0;
    this.skipped = 0;
    this.video = Object.assign(document.createElement("video"), { muted: true, playsInline: true, srcObject: media });
    this.video.play();
    this.canvas = Object.assign(document.createElement("canvas"), { width, height });
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
    const ctx = canvas.getContext("2d");
    // Centre-crop to the stream's aspect ratio so the picture is not squashed.
    const ar = canvas.width / canvas.height;
    const vw = video.videoWidth;
    const vh = video.videoHeight;
    const cw = Math.min(vw, vh * ar);
    const ch = cw / ar;
    ctx.drawImage(video, (vw - cw) / 2, (vh - ch) / 2, cw, ch, 0, 0, canvas.width, canvas.height);
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
