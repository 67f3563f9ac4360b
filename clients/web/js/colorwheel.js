// The flow colour convention, in one place: hue = direction of motion (angle of (dx, dy), image y pointing down,
// 0° = right = red), saturation = speed relative to the frame's fastest pixel, value = 1. It is the OpenCV HSV
// convention the server uses for its flow image; the legend and the arrows both derive from it.

/** Draws the colour-wheel legend: what colour each direction of motion gets, faster towards the rim. */
export function drawLegend(canvas) {
  const ctx = canvas.getContext("2d");
  const { width: w, height: h } = canvas;
  const r = Math.min(w, h) / 2 - 1;
  const img = ctx.createImageData(w, h);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const dx = x - w / 2 + 0.5;
      const dy = y - h / 2 + 0.5;
      const rho = Math.hypot(dx, dy) / r;
      if (rho > 1) continue;
      const [R, G, B] = hsvToRgb(angleDeg(dx, dy), rho, 1);
      const i = (y * w + x) * 4;
      img.data.set([R, G, B, rho > 0.97 ? 255 * (1 - rho) * 33 : 255], i);
    }
  }
  ctx.clearRect(0, 0, w, h);
  ctx.putImageData(img, 0, 0);
}

function angleDeg(dx, dy) {
  return ((Math.atan2(dy, dx) * 180) / Math.PI + 360) % 360;
}

function hsvToRgb(hDeg, s, v) {
  const f = (n) => {
    const k = (n + hDeg / 60) % 6;
    return Math.round(255 * (v - v * s * Math.max(0, Math.min(k, 4 - k, 1))));
  };
  return [f(5), f(3), f(1)];
}

/** Inverse of the convention: a flow-image pixel -> unit-scaled motion vector (dx, dy), |v| = saturation. */
export function vectorFromRgb(r, g, b) {
  const max = Math.max(r, g, b);
  const min = Math.min(r, g, b);
  if (max === 0 || max === min) return [0, 0];
  const d = max - min;
  let h;
  if (max === r) h = ((g - b) / d + 6) % 6;
  else if (max === g) h = (b - r) / d + 2;
  else h = (r - g) / d + 4;
  const s = d / max;
  const a = (h * Math.PI) / 3;
  return [s * Math.cos(a), s * Math.sin(a)];
}
