// Words and numbers for people: error codes into sentences, seconds into ms.

/** {"code": "source_unreachable", "message": "connection refused"} -> "source unreachable: connection refused". */
export function errorWords(error) {
  if (!error) return "";
  if (typeof error === "string") return error.replaceAll("_", " ");
  const code = error.code ? String(error.code).replaceAll("_", " ") : "";
  const message = error.message || error.detail || "";
  if (code && message) return `${code}: ${message}`;
  return code || message || JSON.stringify(error);
}

export const ms = (s) => (s == null || !Number.isFinite(s) ? "–" : `${(s * 1000).toFixed(s < 0.01 ? 1 : 0)} ms`);

export function num(x, digits = 4) {
  if (x == null || !Number.isFinite(x)) return "–";
  const a = Math.abs(x);
  return a !== 0 && (a < 1e-3 || a >= 1e4) ? x.toExponential(2) : x.toPrecision(digits);
}

/** The stream's source in a few characters: a URL's host and file, or the keyword. */
export function shortSource(source) {
  if (!source) return "";
  try {
    const u = new URL(source);
    if (u.host) return `${u.protocol}//${u.host}${u.pathname.length > 1 ? "/…" + u.pathname.split("/").pop() : ""}`;
  } catch {
    /* not a URL: demo, webcam, camera:N */
  }
  return source;
}
