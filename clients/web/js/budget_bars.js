// The frame budget at a glance: the verdict pill and one bar per share of a frame's work, against ΔS.
import { ms } from "./format.js";

/** The timings of the frames that arrived over the last ``spanMs``, averaged: the readouts say how the stream keeps
 * up, while one frame's work varies by tens of ms (the budget chart shows each frame's). */
export class RecentTimings {
  constructor(spanMs = 2000) {
    this.spanMs = spanMs;
    this.frames = [];
  }

  clear() {
    this.frames = [];
  }

  /** One frame message's timings, arrived at ``now`` (ms). A new number of stages (a rebuilt pipeline) starts over. */
  push(now, m) {
    const stages = Array.isArray(m.stage_dp_s) ? m.stage_dp_s : [];
    if (this.frames.length && this.frames[0].stages.length !== stages.length) this.clear();
    this.frames.push({ at: now, work: m.work_s, step: m.dp_s, stages, ds: m.ds_s });
    while (this.frames.length > 1 && now - this.frames[0].at > this.spanMs) this.frames.shift();
  }

  /** {work, step, stages, ds}: the means in seconds (a stage's over the frames that timed it), ΔS the newest. */
  mean() {
    const average = (values) => {
      const known = values.filter(Number.isFinite);
      return known.length ? known.reduce((a, b) => a + b, 0) / known.length : null;
    };
    const newest = this.frames[this.frames.length - 1];
    return {
      work: average(this.frames.map((f) => f.work)),
      step: average(this.frames.map((f) => f.step)),
      stages: newest.stages.map((_, k) => average(this.frames.map((f) => f.stages[k]))),
      ds: newest.ds,
    };
  }
}

/** The pill beside the budget chart: under or over ΔS, in percent; "–" before the first frame. */
export function renderVerdict(pill, ratio) {
  if (ratio == null) {
    pill.dataset.state = "idle";
    pill.textContent = "–";
    return;
  }
  pill.dataset.state = ratio <= 1 ? "under" : "over";
  pill.textContent = `${ratio <= 1 ? "under" : "over"} budget · ${Math.round(ratio * 100)}%`;
}

/** One bar for the frame's whole work, one for the pipeline step, one per stage; the amber tick is ΔS. The track
 * spans 1.5 ΔS. */
export function renderStageBars(box, work, step, stages, ds) {
  const rows = [["work", work], ["step", step], ...stages.map((s, k) => [`stage ${k}`, s])];
  if (box.children.length !== rows.length) {
    box.replaceChildren(
      ...rows.map(() => {
        const row = document.createElement("div");
        row.className = "stage-bar";
        row.innerHTML = '<span class="name"></span><span class="track"><span class="fill"></span><span class="budget"></span></span><span class="val"></span>';
        return row;
      }),
    );
  }
  const full = ds * 1.5;
  rows.forEach(([name, value], i) => {
    const row = box.children[i];
    row.classList.toggle("over", value > ds);
    row.querySelector(".name").textContent = name;
    row.querySelector(".fill").style.width = `${Math.min(100, (value / full) * 100)}%`;
    row.querySelector(".budget").style.left = `${(ds / full) * 100}%`;
    row.querySelector(".val").textContent = ms(value);
  });
}
