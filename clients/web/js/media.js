// The server's media folder from the page: a video on this computer sent into it (the File tab), the videos already
// there listed under it (each to delete), and as the URL field's suggestions (file:NAME).
import { api } from "./api.js";

const mb = (bytes) => `${(bytes / 2 ** 20).toFixed(1)} MB`;
const fileSize = (bytes) => (bytes < 2 ** 20 ? `${Math.ceil(bytes / 2 ** 10)} KB` : mb(bytes));

/** The name a video is sent under: its own, with what a media file's name cannot hold (server/stream/source/
 * media_files.py) as "-". */
function mediaName(file) {
  return file.name.replace(/[^A-Za-z0-9._-]/g, "-").slice(-128).replace(/^[._-]+/, "") || "video";
}

/** `name`, or the first of stem-2.ext, stem-3.ext, ... that `taken` (and the server's own demo.mp4) leaves free,
 * within a media name's 128 characters: as `overtime watch` names a video it sends (clients/watch.py). */
function freeName(name, taken) {
  const dot = name.lastIndexOf(".");
  const [stem, ext] = dot > 0 ? [name.slice(0, dot), name.slice(dot)] : [name, ""];
  let free = name;
  for (let n = 2; free === "demo.mp4" || taken.has(free); n += 1) {
    const suffix = `-${n}${ext}`;
    free = stem.slice(0, 128 - suffix.length) + suffix;
  }
  return free;
}

/** Puts `file` in the server's media folder, saying so on `button`; its file: source. Checked against the server's
 * limit first: a server that refuses a body midway resets the connection, and the page would only see that. A video
 * of the same name and size there already is played, not sent again; beside another of that name it is sent under a
 * free one, so a video someone else sent (and a stream may play) is never replaced. */
export async function sendVideo(file, button) {
  const { files, max_upload_bytes: limit } = await api.media();
  if (file.size > limit) {
    throw new Error(`${file.name} is ${mb(file.size)}; the server takes videos of at most ${mb(limit)}`);
  }
  const name = mediaName(file);
  const there = files.find((held) => held.name === name);
  if (there && there.size_bytes === file.size) return there.source;
  const label = button.textContent;
  button.textContent = `Sending ${mb(file.size)} …`;
  try {
    return (await api.sendVideo(freeName(name, new Set(files.map((held) => held.name))), file)).source;
  } finally {
    button.textContent = label;
  }
}

/** Fills `datalist` with the media folder's videos (file:NAME); suggestions only, so a failure leaves it empty. */
export async function suggestMediaFiles(datalist) {
  const { files } = await api.media().catch(() => ({ files: [] }));
  const option = (file) => Object.assign(document.createElement("option"), { value: file.source });
  datalist.replaceChildren(...files.map(option));
}

/** Lists the media folder's videos in `list`, each with a Delete button that asks again before it deletes (a video
 * deleted is gone from the server). `onError` gets what the server refused in words (a video a stream plays: 409). */
export async function listMediaFiles(list, onError) {
  const { files } = await api.media().catch(() => ({ files: [] }));
  const item = (file) => {
    const li = document.createElement("li");
    const span = (className, textContent) => Object.assign(document.createElement("span"), { className, textContent });
    const name = Object.assign(span("name", file.name), { title: file.name });
    const size = span("size", fileSize(file.size_bytes));
    const button = Object.assign(document.createElement("button"), {
      type: "button", className: "ghost danger small", textContent: "Delete",
    });
    button.addEventListener("click", async () => {
      if (!button.classList.contains("confirm")) {
        button.classList.add("confirm");
        button.textContent = "Delete?";
        return;
      }
      button.disabled = true;
      try {
        await api.deleteVideo(file.name);
        await listMediaFiles(list, onError);
      } catch (err) {
        onError(err);
        button.disabled = false;
        button.classList.remove("confirm");
        button.textContent = "Delete";
      }
    });
    li.append(name, size, button);
    return li;
  };
  list.replaceChildren(...files.map(item));
}
