// What learning bought: the learner's loss beside its frozen start's on the frames the start scored (every tenth),
// as the server judges it (server/stream/learner/versus_start.py): the mean of each over the last ten scored frames.

export class VersusStart {
  constructor(window = 10) {
    this.window = window;
    this.clear();
  }

  clear() {
    this.pairs = [];
  }

  /** One scored frame: the learner's loss and the frozen start's, both on what that frame's step learned from. */
  add(learned, start) {
    if (!Number.isFinite(learned) || !Number.isFinite(start)) return;
    this.pairs.push([learned, start]);
    if (this.pairs.length > this.window) this.pairs.shift();
  }

  /** The frozen start's mean loss over the window (null before any), drawn on the loss chart. */
  start() {
    return this.pairs.length ? this.pairs.reduce((s, p) => s + p[1], 0) / this.pairs.length : null;
  }

  /** The learner's mean loss over the start's (null before any): under 1, it explains the pairs it learns from better. */
  ratio() {
    const start = this.start();
    if (!start) return null;
    return this.pairs.reduce((s, p) => s + p[0], 0) / this.pairs.length / start;
  }
}
