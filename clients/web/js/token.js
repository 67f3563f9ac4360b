// The API token: asked for once (when the server says 401), kept in sessionStorage for this tab only.
const KEY = "overtime.token";
const dialog = () => document.getElementById("token-dialog");
let pending = null;

export function getToken() {
  return sessionStorage.getItem(KEY) || "";
}

export function setToken(token) {
  if (token) sessionStorage.setItem(KEY, token);
  else sessionStorage.removeItem(KEY);
}

/** Shows the token dialog; resolves with the token, or "" when cancelled. Concurrent callers share one dialog. */
export function askToken() {
  if (pending) return pending;
  const dlg = dialog();
  const input = document.getElementById("token-input");
  input.value = getToken();
  pending = new Promise((resolve) => {
    const done = (value) => {
      dlg.close();
      pending = null;
      if (value) setToken(value);
      resolve(value);
    };
    document.getElementById("token-form").onsubmit = (ev) => {
      ev.preventDefault();
      done(input.value.trim());
    };
    document.getElementById("token-cancel").onclick = () => done("");
    dlg.oncancel = () => done("");
    dlg.showModal();
    input.focus();
  });
  return pending;
}
