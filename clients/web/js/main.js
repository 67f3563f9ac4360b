// Wires the page together: the new-stream form, the stream list, the live view and its charts, deep links.
import { api } from "./api.js";
import { RecentTimings, renderStageBars, renderVerdict } from "./budget_bars.js";
import { budgetSeries, LiveChart, lossSeries, COLORS } from "./charts.js";
import { VersusStart } from "./versus_start.js";
import { drawLegend } from "./colorwheel.js";
import { errorWords, ms, num, shortSource } from "./format.js";
import { LiveStream } from "./live.js";
import { bindStreamForm } from "./new_stream.js";
import { renderStreams } from "./streams.js";
import { renderBudgetNote, renderNotes } from "./stream_notes.js";
import { askToken } from "./token.js";
import { FlowView } from "./view.js";

const $ = (id) => document.getElementById(id);
const POLL_MS = 2000;
const LIVE_STATES = ["running", "reconnecting", "starting"];

const state = {
  selected: null, // stream id on screen
  live: null, // LiveStream
  streams: [],
  pumps: new Map(), // stream id -> WebcamPump (webcam streams started from this tab)
  budgetMs: 0,
  stages: 0,
  arrivals: [],
  recent: new RecentTimings(), // the budget's readouts: the last 2 s of frames
  smoothLoss: null,
  versus: new VersusStart(), // the learner's loss beside its frozen start's
  lastFrame: -1, // the newest frame on the charts (from the history or the socket)
};

const view = new FlowView($("view"));
const charts = {
  loss: new LiveChart($("chart-loss"), { series: lossSeries(), yLabel: "loss", log: true }),
  budget: new LiveChart($("chart-budget"), {
    series: budgetSeries(0, () => state.budgetMs),
    yLabel: "ms",
    yRange: (u, min, max) => [0, max * 1.1], // from zero: how much of the budget is used, at a glance
  }),
  dropped: new LiveChart($("chart-dropped"), {
    series: [{ label: "dropped", stroke: COLORS.bad, fill: "rgba(255,93,108,.12)", width: 1.5, legendColor: COLORS.bad }],
    yLabel: "frames",
    yRange: (u, min, max) => [0, Math.max(5, max * 1.1)],
  }),
  latency: new LiveChart($("chart-latency"), {
    series: [{ label: "latency", stroke: COLORS.loss, fill: "rgba(122,162,255,.12)", width: 1.5, legendColor: COLORS.loss }],
    yLabel: "ms",
  }),
};

// ---------- stream list ----------
async function refreshList() {
  try {
    state.streams = await api.list();
    setServerStatus("ok", "server ok");
  } catch (err) {
    setServerStatus("down", err.status === 401 ? "token needed" : "server unreachable");
    return;
  }
  $("stream-count").textContent = state.streams.length ? `(${state.streams.length})` : "";
  renderStreams($("stream-list"), state.streams, state.selected, { open, checkpoint, remove });
  const current = state.streams.find((s) => s.id === state.selected);
  if (state.selected && !current) {
    // Deleted elsewhere, or a stale link: say so instead of reconnecting forever.
    const gone = state.selected;
    close({ push: false });
    $("live-error").textContent = `stream ${gone} does not exist (any more)`;
    $("live-error").hidden = false;
  }
  if (current) {
    $("live-title").textContent = current.name || current.id;
    if (!state.pumps.has(current.id)) $("live-sub").textContent = describe(current);
    showStreamInfo(current);
  }
}

function setServerStatus(kind, text) {
  const pill = $("server-status");
  pill.dataset.state = kind;
  pill.textContent = text;
}

async function checkpoint(id, button) {
  button.disabled = true;
  try {
    const info = await api.checkpoint(id); // save now, then download what was saved
    toast(`checkpoint saved${info.frames != null ? ` after ${info.frames} frames` : ""}${info.name ? ` as “${info.name}”` : ""}`, "good");
    const res = await api.downloadCheckpoint(id);
    const blob = await res.blob();
    const disposition = res.headers.get("content-disposition") || "";
    const filename = /filename="?([^";]+)"?/.exec(disposition)?.[1] || `overtime-${id}.pt`;
    const a = Object.assign(document.createElement("a"), { href: URL.createObjectURL(blob), download: filename });
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
  } catch (err) {
    toast(`checkpoint failed: ${err.message}`, "bad");
  } finally {
    button.disabled = false;
  }
}

async function remove(id, button) {
  button.disabled = true;
  try {
    state.pumps.get(id)?.stop();
    state.pumps.delete(id);
    await api.remove(id);
    if (state.selected === id) close();
  } catch (err) {
    toast(`could not delete: ${err.message}`, "bad");
  }
  await refreshList();
}

/** A short notice in the corner that goes away by itself. */
function toast(text, kind = "good") {
  const box = $("toast");
  box.textContent = text;
  box.dataset.kind = kind;
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (box.hidden = true), 5000);
}

// ---------- live view ----------
function open(id, { push = true } = {}) {
  if (state.selected === id && state.live) return;
  close({ push: false });
  state.selected = id;
  if (push) history.pushState({ stream: id }, "", `?stream=${encodeURIComponent(id)}`);
  const info = state.streams.find((s) => s.id === id);
  $("live-title").textContent = info?.name || id;
  $("live-sub").textContent = info ? describe(info) : `stream ${id}`;
  $("view-empty").textContent = "waiting for frames…";
  $("view-empty").hidden = false;
  if (info) showStreamInfo(info);
  resetCharts(info?.stages || 0);
  renderStreams($("stream-list"), state.streams, state.selected, { open, checkpoint, remove });
  // The charts start from the server's history (a reloaded page gets them back), then the socket adds to them.
  api
    .history(id)
    .then((h) => state.selected === id && h.points.forEach((p) => chartPoint(p)))
    .catch(() => {})
    .finally(() => {
      if (state.selected === id && !state.live) state.live = new LiveStream(id, { onFrame, onStatus, onConnection });
    });
}

function close({ push = true } = {}) {
  state.live?.close();
  state.live = null;
  state.selected = null;
  view.clear();
  $("live-title").textContent = "Nothing playing";
  $("live-sub").textContent = "Start a stream or pick one from the list.";
  $("view-empty").textContent = "no stream selected";
  $("view-empty").hidden = false;
  $("live-error").hidden = true;
  renderNotes($("stream-notes"), []);
  setLiveState("idle");
  if (push) history.pushState({}, "", window.location.pathname);
}

function describe(s) {
  const parts = [shortSource(s.source)];
  if (s.fps) parts.push(`${+s.fps.toFixed(2)} fps (ΔS ${ms(1 / s.fps)})`);
  if (s.width) parts.push(`picture ${s.width}×${s.height}`);
  if (s.learning_size) parts.push(`learning ${s.learning_size.width}×${s.learning_size.height}${s.auto ? " (auto)" : ""}`);
  if (s.stages) parts.push(`${s.stages} stages`);
  if (s.model) parts.push(`${s.model} net, ${s.init}`);
  if (s.lr) parts.push(`lr ${num(s.lr, 2)}`);
  if (s.resumed_from) parts.push(`resumed after ${s.resumed_from} frames`);
  return parts.join(" · ");
}

function resetCharts(stages) {
  state.stages = stages;
  state.budgetMs = 0;
  state.arrivals = [];
  state.recent.clear();
  state.smoothLoss = null;
  state.versus.clear();
  state.lastFrame = -1;
  charts.loss.reset();
  charts.budget.reset(budgetSeries(stages, () => state.budgetMs));
  charts.dropped.reset();
  charts.latency.reset();
  $("stage-bars").replaceChildren();
  for (const id of ["frame", "fps", "loss", "versus", "budget", "dropped", "latency"]) $(`stat-${id}`).textContent = "–";
  $("legend-scale").textContent = "rim: – px/frame";
  renderVerdict($("budget-verdict"), null);
}

function setLiveState(text, kind = text) {
  const pill = $("live-state");
  pill.dataset.state = kind;
  pill.textContent = text;
}

/** Stream state and last error from the REST API or a WebSocket state message. */
function showStreamInfo(s) {
  if (s.state) setLiveState(s.state);
  const words = s.state === "error" || s.state === "reconnecting" || s.state === "ended" ? errorWords(s.error) : "";
  const banner = $("live-error");
  banner.hidden = !words;
  banner.textContent = words;
  if (s.budget_note !== undefined) renderBudgetNote($("budget-note"), s.budget_note);
  if (s.notes !== undefined) renderNotes($("stream-notes"), s.notes);
  const waiting = {
    starting: `${s.phase || "starting"}…`,
    reconnecting: `reconnecting to the source${s.counters?.reconnects ? ` (attempt ${s.counters.reconnects})` : ""}…`,
    ended: "the stream has ended",
    error: words || "error",
  }[s.state];
  if (waiting) {
    $("view-empty").textContent = waiting;
    $("view-empty").hidden = Boolean(view.images);
  }
}

function onStatus(msg) {
  if (msg.state) showStreamInfo({ ...msg, budget_note: undefined });
  else if (msg.error || msg.type === "error") {
    const banner = $("live-error");
    banner.textContent = errorWords(msg.error || msg);
    banner.hidden = false;
  }
}

function onConnection(kind, detail) {
  if (kind === "open") return;
  if (kind === "reconnecting") setLiveState(`reconnecting (${detail})`, "reconnecting");
  else if (kind === "connecting") setLiveState("connecting");
  else if (kind === "closed" && detail) {
    setLiveState("closed", "error");
    const banner = $("live-error");
    banner.textContent = detail;
    banner.hidden = false;
  }
}

function onFrame({ metrics: m, images }) {
  if (images && Object.keys(images).length) {
    view.show(images);
    $("view-empty").hidden = true;
    applyCapabilities(view.capabilities(images));
    fitAspect();
  }
  setLiveState("running");
  const now = performance.now();
  state.arrivals.push(now);
  while (state.arrivals.length > 2 && now - state.arrivals[0] > 3000) state.arrivals.shift();
  const span = (now - state.arrivals[0]) / 1000;
  const fps = span > 0 ? (state.arrivals.length - 1) / span : null;
  chartPoint(m);

  state.recent.push(now, m);
  const recent = state.recent.mean();
  $("stat-frame").textContent = String(m.frame);
  $("stat-fps").textContent = fps == null ? "–" : fps.toFixed(1);
  if (m.loss != null) $("stat-loss").textContent = num(m.loss); // none where the step's pair was known nowhere
  const versus = state.versus.ratio();
  $("stat-versus").textContent = versus == null ? "–" : `${versus.toFixed(2)}×`;
  $("stat-versus").className = versus == null ? "" : versus <= 1 ? "under" : "over";
  const ratio = recent.ds > 0 && recent.work != null ? recent.work / recent.ds : null;
  const budget = $("stat-budget");
  budget.textContent = ratio == null ? "–" : `${ratio.toFixed(2)}`;
  budget.className = ratio == null ? "" : ratio <= 1 ? "under" : "over";
  $("stat-dropped").textContent = m.dropped ?? "–";
  $("stat-latency").textContent = ms(m.latency_s);
  if (m.flow_scale) $("legend-scale").textContent = `rim: ${m.flow_scale.toFixed(1)} px/frame`;
  renderVerdict($("budget-verdict"), ratio);
  renderStageBars($("stage-bars"), recent.work, recent.step, recent.stages, recent.ds);
}

/** One frame on the charts (a live message or a point of the server's history), each frame once, in order. */
function chartPoint(m) {
  if (m.frame <= state.lastFrame) return;
  state.lastFrame = m.frame;
  const stages = Array.isArray(m.stage_dp_s) ? m.stage_dp_s : [];
  if (stages.length !== state.stages) {
    state.stages = stages.length;
    charts.budget.reset(budgetSeries(stages.length, () => state.budgetMs));
  }
  state.budgetMs = m.ds_s * 1000;
  if (Number.isFinite(m.loss)) state.smoothLoss = state.smoothLoss == null ? m.loss : 0.9 * state.smoothLoss + 0.1 * m.loss;
  if (m.start_scored) state.versus.add(m.start_scored.loss, m.start_scored.loss_start);
  charts.loss.push(m.frame, [m.loss, state.smoothLoss, m.loss_zero, state.versus.start()]);
  charts.budget.push(m.frame, [m.work_s * 1000, m.dp_s * 1000, ...stages.map((s) => (s == null ? null : s * 1000)), state.budgetMs]);
  charts.dropped.push(m.frame, [m.dropped]);
  charts.latency.push(m.frame, [m.latency_s * 1000]);
}

/** The picture box takes the stream's aspect ratio (twice as wide side by side), so nothing is letterboxed. */
function fitAspect() {
  const img = view.images && Object.values(view.images)[0];
  if (!img) return;
  const split = view.mode === "split" && view.capabilities(view.images).split;
  $("view").parentElement.style.setProperty("--ar", String((img.width * (split ? 2 : 1)) / img.height));
}

function applyCapabilities(caps) {
  for (const mode of ["split", "raw", "flow"]) {
    const input = $(`mode-${mode}`);
    input.disabled = !caps[mode];
    input.nextElementSibling.title = caps[mode] ? "" : "the server sends the overlay pre-blended";
  }
  $("opacity").disabled = !caps.opacity;
  $("arrows").disabled = !caps.arrows;
}

// ---------- controls ----------
function bindControls() {
  bindStreamForm({
    pumps: state.pumps,
    onCreated: async (id) => {
      await refreshList();
      open(id);
    },
  });
  document.querySelectorAll('input[name="mode"]').forEach((r) =>
    r.addEventListener("change", () => {
      view.mode = r.value;
      fitAspect();
      view.render();
    }),
  );
  $("opacity").addEventListener("input", (ev) => {
    view.opacity = ev.target.value / 100;
    view.render();
  });
  $("arrows").addEventListener("change", (ev) => {
    view.arrows = ev.target.checked;
    view.render();
  });
  $("loss-log").addEventListener("change", (ev) => charts.loss.setLog(ev.target.checked));
  $("token-button").addEventListener("click", async () => {
    if (await askToken()) refreshList();
  });
  new ResizeObserver(() => view.render()).observe($("view"));
  window.addEventListener("popstate", () => routeFromUrl());
}

function routeFromUrl() {
  const id = new URLSearchParams(window.location.search).get("stream");
  if (id) open(id, { push: false });
  else if (state.selected) close({ push: false });
  return Boolean(id);
}

async function boot() {
  drawLegend($("legend"));
  bindControls();
  const linked = routeFromUrl();
  await refreshList();
  if (!linked && !state.selected) {
    const running = LIVE_STATES.map((st) => state.streams.find((s) => s.state === st)).find(Boolean);
    if (running) {
      history.replaceState({ stream: running.id }, "", `?stream=${encodeURIComponent(running.id)}`);
      open(running.id, { push: false });
    }
  }
  setInterval(refreshList, POLL_MS);
}

// A read-only handle for people poking at the page from the console, and for the browser tests.
window.overtime = { state, charts, view };
boot();
