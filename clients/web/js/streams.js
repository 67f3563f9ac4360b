// The list of streams: state, errors in words, reconnects, and the actions on each (open, checkpoint, delete).
import { errorWords, shortSource } from "./format.js";

// Counters worth a glance: always these, then any other that is not zero (restarts, non-finite losses, ...).
const ALWAYS = ["processed", "dropped", "reconnects"];
const QUIET = new Set(["decoded", "resampled"]); // bookkeeping of the decoder, not news

function counterText(counters) {
  if (!counters || typeof counters !== "object") return "";
  const rest = Object.keys(counters).filter((k) => !ALWAYS.includes(k) && !QUIET.has(k) && counters[k]);
  return [...ALWAYS.filter((k) => k in counters), ...rest]
    .filter((k) => typeof counters[k] === "number")
    .map((k) => `${k.replaceAll("_", " ")} ${counters[k]}`)
    .join(" · ");
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  node.append(...children.filter((c) => c != null && c !== ""));
  return node;
}

/** Renders `streams` into `list`; `actions` = {open(id), checkpoint(id, button), remove(id, button)}. */
export function renderStreams(list, streams, selectedId, actions) {
  list.replaceChildren();
  if (!streams.length) {
    list.append(el("li", { class: "empty muted" }, "No streams yet. Start one above."));
    return;
  }
  for (const s of streams) {
    const stop = (ev) => ev.stopPropagation();
    const err = s.state === "error" || s.state === "reconnecting" ? errorWords(s.error) : "";
    const item = el(
      "li",
      { class: `stream-item${s.id === selectedId ? " selected" : ""}`, dataset: { id: s.id, state: s.state }, onclick: () => actions.open(s.id) },
      el("div", { class: "row" }, el("span", { class: "title" }, s.name || s.id), el("span", { class: "pill", dataset: { state: s.state } }, s.state)),
      el("div", { class: "src", title: s.source || "" }, shortSource(s.source), s.fps ? ` · ${s.fps} fps` : "", s.width ? ` · ${s.width}×${s.height}` : ""),
      err ? el("div", { class: "err" }, err) : null,
      el("div", { class: "counters" }, counterText(s.counters)),
      el(
        "div",
        { class: "actions", onclick: stop },
        el("button", { type: "button", onclick: () => actions.open(s.id) }, "Watch"),
        el("button", { type: "button", title: "save and download the learned weights", onclick: (ev) => actions.checkpoint(s.id, ev.currentTarget) }, "⤓ Checkpoint"),
        el("button", { type: "button", class: "danger", onclick: (ev) => actions.remove(s.id, ev.currentTarget) }, "Stop & delete"),
      ),
    );
    list.append(item);
  }
}
