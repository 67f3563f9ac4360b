// The service's HTTP API (/api/streams): one fetch wrapper that adds the token and turns failures into readable Errors.
import { askToken, getToken } from "./token.js";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** Reads FastAPI's {"detail": ...} (a string or a list of validation errors) into one sentence. */
async function errorMessage(res) {
  let body = null;
  try {
    body = await res.json();
  } catch {
    return `${res.status} ${res.statusText}`;
  }
  const detail = body?.detail ?? body?.error ?? body?.message ?? body;
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) return detail.map((d) => `${(d.loc || []).slice(1).join(".") || "body"}: ${d.msg}`).join("; ");
  if (detail?.message) return detail.code ? `${detail.code.replaceAll("_", " ")}: ${detail.message}` : detail.message;
  return JSON.stringify(detail);
}

/** `body` goes as JSON, a File (a video sent) as itself. */
export async function request(method, path, body, { raw = false, retried = false } = {}) {
  const headers = {};
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const isFile = body instanceof Blob;
  if (body !== undefined) headers["Content-Type"] = isFile ? "application/octet-stream" : "application/json";
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined || isFile ? body : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(0, `server unreachable: ${err.message}`);
  }
  if (res.status === 401 && !retried) {
    if (await askToken()) return request(method, path, body, { raw, retried: true });
  }
  if (!res.ok) throw new ApiError(res.status, await errorMessage(res));
  if (raw) return res;
  if (res.status === 204) return null;
  const type = res.headers.get("content-type") || "";
  return type.includes("json") ? res.json() : res.text();
}

export const api = {
  list: async () => {
    const body = await request("GET", "/api/streams");
    return Array.isArray(body) ? body : body.streams || [];
  },
  get: (id) => request("GET", `/api/streams/${encodeURIComponent(id)}`),
  history: (id) => request("GET", `/api/streams/${encodeURIComponent(id)}/history`),
  create: (spec) => request("POST", "/api/streams", spec),
  remove: (id) => request("DELETE", `/api/streams/${encodeURIComponent(id)}`),
  checkpoint: (id) => request("POST", `/api/streams/${encodeURIComponent(id)}/checkpoint`),
  downloadCheckpoint: (id) => request("GET", `/api/streams/${encodeURIComponent(id)}/checkpoint`, undefined, { raw: true }),
  media: () => request("GET", "/api/media"),
  sendVideo: (name, file) => request("PUT", `/api/media/${encodeURIComponent(name)}`, file),
  deleteVideo: (name) => request("DELETE", `/api/media/${encodeURIComponent(name)}`),
  health: async () => (await fetch("/healthz")).ok,
};

/** ws:// or wss:// URL for a path on this server, with ?token= when one is set (WebSockets carry no headers). */
export function wsUrl(path) {
  const url = new URL(path, window.location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  const token = getToken();
  if (token) url.searchParams.set("token", token);
  return url.toString();
}
