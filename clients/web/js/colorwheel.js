// The flow colour convention, in one place: the Middlebury colour wheel of Baker et al., as models/flow_viz.py
// draws it (hue = direction of motion, saturation = speed relative to the stream's colour scale, the speed at the
// rim, which the server sends as flow_scale in pixels per frame; zero motion = white). The legend and the arrows
// both derive from it.

const SEGMENTS = [
  [15, [255, 0, 0], [255, 255, 0]],
  [6, [255, 255, 0], [0, 255, 0]],
  [4, [0, 255, 0], [0, 255, 255]],
  [11, [0, 255, 255], [0, 0, 255]],
  [13, [0, 0, 255], [255, 0, 255]],
  [6, [255, 0, 255], [255, 0, 0]],
];
const WHEEL = SEGMENTS.flatMap(([n, a, b]) => Array.from({ length: n }, (_, i) => a.map((v, c) => v + ((b[c] - v) * i) / n)));

/** RGB (0..255) of the motion (u, v), |(u, v)| <= 1 being the speed at the rim; image y points down. */
export function flowColor(u, v) {
  const rad = Math.min(1, Math.hypot(u, v));
  const pos = ((Math.atan2(-v, -u) / Math.PI + 1) / 2) * (WHEEL.length - 1);
  const k0 = Math.floor(pos);
  const k1 = (k0 + 1) % WHEEL.length;
  const f = pos - k0;
  return [0, 1, 2].map((c) => Math.round(255 * (1 - rad * (1 - ((1 - f) * WHEEL[k0][c] + f * WHEEL[k1][c]) / 255))));
}

/** Draws the legend: the colour of every motion inside the unit disc (faster towards the rim). */
export function drawLegend(canvas) {
  const ctx = canvas.getContext("2d");
  const { width: w, height: h } = canvas;
  const r = Math.min(w, h) / 2 - 1;
  const img = ctx.createImageData(w, h);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const u = (x - w / 2 + 0.5) / r;
      const v = (y - h / 2 + 0.5) / r;
      const rho = Math.hypot(u, v);
      if (rho > 1) continue;
      const alpha = rho > 0.96 ? Math.round(255 * (1 - rho) * 25) : 255; // soft rim
      img.data.set([...flowColor(u, v), alpha], (y * w + x) * 4);
    }
  }
  ctx.clearRect(0, 0, w, h);
  ctx.putImageData(img, 0, 0);
}

// Direction lookup for reading colours back: the wheel's pure colour at 1° steps.
const DIRECTIONS = Array.from({ length: 360 }, (_, d) => {
  const a = (d * Math.PI) / 180;
  return { u: Math.cos(a), v: Math.sin(a), rgb: flowColor(Math.cos(a), Math.sin(a)) };
});

/** Inverse of the convention: a flow-image pixel -> motion (u, v) scaled so the speed at the rim has length 1. */
export function vectorFromRgb(r, g, b) {
  const rad = 1 - Math.min(r, g, b) / 255; // the wheel colour's weakest channel is 0, so white shows through it
  if (rad < 0.05) return [0, 0];
  const pure = [r, g, b].map((c) => 255 - (255 - c) / rad);
  let best = DIRECTIONS[0];
  let bestErr = Infinity;
  for (const d of DIRECTIONS) {
    const err = (d.rgb[0] - pure[0]) ** 2 + (d.rgb[1] - pure[1]) ** 2 + (d.rgb[2] - pure[2]) ** 2;
    if (err < bestErr) [best, bestErr] = [d, err];
  }
  return [best.u * rad, best.v * rad];
}
