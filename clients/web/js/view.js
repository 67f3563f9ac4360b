// The live picture: raw frame, flow image, their blend (opacity slider), side by side, and optional arrows.
import { vectorFromRgb } from "./colorwheel.js";

const ARROW_CELLS = 14; // arrows across the picture's width

export class FlowView {
  constructor(canvas) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.mode = "overlay";
    this.opacity = 0.6;
    this.arrows = false;
    this.images = null;
    this.scratch = document.createElement("canvas");
  }

  /** What the server sends decides what can be shown: a pre-blended overlay alone has no raw or flow view. */
  capabilities(images) {
    const separate = Boolean(images?.frame && images?.flow);
    return { raw: separate, flow: separate, split: separate, opacity: separate, arrows: Boolean(images?.flow) };
  }

  show(images) {
    if (this.images && this.images !== images) Object.values(this.images).forEach((b) => b.close?.());
    this.images = images;
    this.render();
  }

  clear() {
    this.show(null);
  }

  fitCanvas() {
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(this.canvas.clientWidth * dpr));
    const h = Math.max(1, Math.round(this.canvas.clientHeight * dpr));
    if (this.canvas.width !== w || this.canvas.height !== h) {
      this.canvas.width = w;
      this.canvas.height = h;
    }
  }

  render() {
    this.fitCanvas();
    const { ctx, canvas } = this;
    ctx.fillStyle = "#05080d";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    const im = this.images;
    if (!im) return;
    const caps = this.capabilities(im);
    const mode = caps[this.mode] === false ? "overlay" : this.mode;
    ctx.imageSmoothingEnabled = true;
    ctx.imageSmoothingQuality = "low";
    if (mode === "split") {
      const half = { w: canvas.width / 2, h: canvas.height };
      this.drawFit(im.frame, 0, 0, half.w, half.h);
      const box = this.drawFit(im.flow, half.w, 0, half.w, half.h);
      if (this.arrows) this.drawArrows(im.flow, box);
      return;
    }
    const base = mode === "flow" ? im.flow : im.frame || im.overlay;
    const box = this.drawFit(base, 0, 0, canvas.width, canvas.height);
    if (mode === "overlay" && im.frame && im.flow) {
      // The frame tinted by the flow's colours, as the server's overlay: white (no motion) leaves the frame as it is.
      // The flow comes at the learning size, whose aspect the rounding to multiples of 8 may change a little: it is
      // stretched onto the frame's own box, so both cover the same pixels.
      ctx.globalCompositeOperation = "multiply";
      ctx.globalAlpha = this.opacity;
      ctx.drawImage(im.flow, box.x, box.y, box.w, box.h);
      ctx.globalAlpha = 1;
      ctx.globalCompositeOperation = "source-over";
    }
    if (this.arrows && im.flow) this.drawArrows(im.flow, box);
  }

  /** Draws an image centred in a box, keeping its aspect ratio; returns where it landed. */
  drawFit(img, x, y, w, h) {
    const s = Math.min(w / img.width, h / img.height);
    const box = { x: x + (w - img.width * s) / 2, y: y + (h - img.height * s) / 2, w: img.width * s, h: img.height * s };
    this.ctx.drawImage(img, box.x, box.y, box.w, box.h);
    return box;
  }

  /** Arrows read back from the flow image's colours (hue = direction, saturation = relative speed). */
  drawArrows(flow, box) {
    const sc = this.scratch;
    sc.width = flow.width;
    sc.height = flow.height;
    const sctx = sc.getContext("2d", { willReadFrequently: true });
    sctx.drawImage(flow, 0, 0);
    const px = sctx.getImageData(0, 0, sc.width, sc.height).data;
    const step = flow.width / ARROW_CELLS;
    const scale = box.w / flow.width;
    const len = step * scale * 0.9;
    const { ctx } = this;
    ctx.save();
    ctx.lineCap = "round";
    ctx.lineWidth = Math.max(1.2, (window.devicePixelRatio || 1) * 1.3);
    for (let sy = step / 2; sy < flow.height; sy += step) {
      for (let sx = step / 2; sx < flow.width; sx += step) {
        const i = (Math.floor(sy) * flow.width + Math.floor(sx)) * 4;
        const [dx, dy] = vectorFromRgb(px[i], px[i + 1], px[i + 2]);
        if (Math.hypot(dx, dy) < 0.15) continue;
        const x0 = box.x + sx * scale;
        const y0 = box.y + (sy * box.h) / flow.height;
        const x1 = x0 + dx * len;
        const y1 = y0 + dy * len;
        const a = Math.atan2(y1 - y0, x1 - x0);
        const head = Math.max(3, len * 0.28 * Math.hypot(dx, dy));
        ctx.strokeStyle = "rgba(0,0,0,.55)";
        ctx.lineWidth += 2;
        this.arrowPath(x0, y0, x1, y1, a, head);
        ctx.lineWidth -= 2;
        ctx.strokeStyle = "rgba(255,255,255,.95)";
        this.arrowPath(x0, y0, x1, y1, a, head);
      }
    }
    ctx.restore();
  }

  arrowPath(x0, y0, x1, y1, a, head) {
    const { ctx } = this;
    ctx.beginPath();
    ctx.moveTo(x0, y0);
    ctx.lineTo(x1, y1);
    ctx.moveTo(x1 - head * Math.cos(a - 0.5), y1 - head * Math.sin(a - 0.5));
    ctx.lineTo(x1, y1);
    ctx.lineTo(x1 - head * Math.cos(a + 0.5), y1 - head * Math.sin(a + 0.5));
    ctx.stroke();
  }
}
