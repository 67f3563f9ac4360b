// The frame budget at a glance: the verdict pill and one bar per share of a frame's work, against ΔS.
import { ms } from "./format.js";

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
