// Live charts on uPlot (vendored, MIT): a rolling window of the last frames, redrawn at most once per animation frame.
import uPlot from "../vendor/uplot/uPlot.esm.js";

const WINDOW = 900; // frames kept per chart
const AXIS = { stroke: "#8795ad", grid: { stroke: "rgba(255,255,255,.06)", width: 1 }, ticks: { stroke: "rgba(255,255,255,.12)", width: 1 } };
export const COLORS = { good: "#3ddc84", bad: "#ff5d6c", budget: "#f5b642", accent: "#38e0c0", loss: "#7aa2ff", muted: "#8795ad" };
const FRAME_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000];
const STAGE_COLORS = ["#7aa2ff", "#c792ea", "#38e0c0", "#f78c6c", "#82aaff", "#ffcb6b", "#89ddff", "#f07178"];

/** A chart whose data grows one x value at a time. `series` = uPlot series after x (with a `legendColor`). */
export class LiveChart {
  constructor(el, { series, yLabel, log = false, yRange }) {
    this.el = el;
    this.config = { series, yLabel, log, yRange };
    this.reset(series);
    new ResizeObserver(() => this.resize()).observe(el);
  }

  reset(series = this.config.series) {
    this.config.series = series;
    this.data = [[], ...series.map(() => [])];
    this.build();
  }

  setLog(log) {
    this.config.log = log;
    this.build();
  }

  build() {
    this.plot?.destroy();
    const { series, yLabel, log, yRange } = this.config;
    const opts = {
      ...this.size(),
      pxAlign: 0,
      cursor: { drag: { x: false, y: false }, points: { size: 6 } },
      legend: { markers: { stroke: (u, i) => u.series[i].legendColor || COLORS.muted, fill: () => "transparent" } },
      scales: { x: { time: false }, y: { distr: log ? 3 : 1, ...(yRange ? { range: yRange } : {}) } },
      axes: [
        { ...AXIS, size: 28, incrs: FRAME_STEPS }, // frames are whole numbers
        { ...AXIS, size: 52, label: yLabel, labelSize: 16, labelFont: "11px system-ui", values: (u, vals) => vals.map(tick) },
      ],
      series: [{ label: "frame" }, ...series.map((s) => ({ points: { show: false }, width: 1.5, ...s }))],
    };
    this.plot = new uPlot(opts, this.data, this.el);
    this.resize(); // now that the legend exists, leave room for its real height
    this.el.dataset.points = String(this.data[0].length);
  }

  size() {
    const legend = this.el.querySelector(".u-legend")?.offsetHeight || 26;
    return { width: Math.max(120, this.el.clientWidth), height: Math.max(80, this.el.clientHeight - legend) };
  }

  /** Fits the plot to its box; cheap when nothing changed, so it also runs before every redraw (the legend's
   * height changes when it wraps, which no ResizeObserver on the box would see). */
  resize() {
    if (!this.plot) return;
    const size = this.size();
    if (size.width !== this.plot.width || size.height !== this.plot.height) this.plot.setSize(size);
  }

  push(x, ys) {
    const d = this.data;
    d[0].push(x);
    ys.forEach((y, i) => d[i + 1]?.push(y == null || !Number.isFinite(y) ? null : y));
    if (d[0].length > WINDOW) d.forEach((col) => col.splice(0, col.length - WINDOW));
    this.el.dataset.points = String(d[0].length);
    if (!this.queued) {
      this.queued = true;
      requestAnimationFrame(() => {
        this.queued = false;
        this.resize();
        this.plot.setData(this.data);
      });
    }
  }
}

function tick(v) {
  if (v == null) return "";
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a < 0.01 || a >= 1e5) return v.toExponential(0);
  return a < 1 ? v.toPrecision(2) : String(+v.toFixed(1));
}

/** Stroke/fill that is green below the ΔS budget and red above it, split exactly at the budget line. */
export function budgetPaint(getBudgetMs, alpha = 1) {
  return (u) => {
    const budget = getBudgetMs();
    const bb = u.bbox;
    if (!budget || !bb || !bb.height) return withAlpha(COLORS.good, alpha);
    const y = u.valToPos(budget, "y", true);
    const t = Math.min(1, Math.max(0, (y - bb.top) / bb.height));
    const g = u.ctx.createLinearGradient(0, bb.top, 0, bb.top + bb.height);
    g.addColorStop(0, withAlpha(COLORS.bad, alpha));
    g.addColorStop(t, withAlpha(COLORS.bad, alpha));
    g.addColorStop(t, withAlpha(COLORS.good, alpha));
    g.addColorStop(1, withAlpha(COLORS.good, alpha));
    return g;
  };
}

function withAlpha(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${n >> 16},${(n >> 8) & 255},${n & 255},${a})`;
}

/** Series for the budget chart: a frame's whole work (green/red), the pipeline step, each stage, and the ΔS line. */
export function budgetSeries(stages, getBudgetMs) {
  return [
    { label: "frame work", stroke: budgetPaint(getBudgetMs), fill: budgetPaint(getBudgetMs, 0.12), width: 2, legendColor: COLORS.good },
    { label: "step ΔP", stroke: COLORS.muted, width: 1, legendColor: COLORS.muted },
    ...Array.from({ length: stages }, (_, k) => ({
      label: `stage ${k}`,
      stroke: STAGE_COLORS[k % STAGE_COLORS.length],
      width: 1,
      legendColor: STAGE_COLORS[k % STAGE_COLORS.length],
    })),
    { label: "ΔS budget", stroke: COLORS.budget, dash: [6, 4], width: 1.5, legendColor: COLORS.budget },
  ];
}

export const lossSeries = () => [
  // A frame whose step learned from a pair known nowhere has no loss (null): the lines go on across it.
  { label: "loss", stroke: "rgba(122,162,255,.45)", width: 1, legendColor: COLORS.loss, spanGaps: true },
  { label: "smoothed", stroke: COLORS.accent, width: 2, legendColor: COLORS.accent },
  { label: "zero flow", stroke: COLORS.budget, dash: [6, 4], width: 1.5, legendColor: COLORS.budget, spanGaps: true },
  { label: "frozen start", stroke: COLORS.bad, dash: [2, 3], width: 1.5, legendColor: COLORS.bad },
];
