// The new-stream form's behaviour: the fields and media folder of the chosen source kind, and its submit (a video on
// this computer sent first, the stream created, a webcam's frames pumped), its errors shown in words.
import { api } from "./api.js";
import { chosenFile, showKindFields, streamSpec } from "./form.js";
import { listMediaFiles, sendVideo, suggestMediaFiles } from "./media.js";
import { WebcamPump } from "./webcam.js";

const $ = (id) => document.getElementById(id);

function showFormError(err) {
  const errorBox = $("form-error");
  errorBox.textContent = err.message;
  errorBox.hidden = false;
}

/** The File tab's list of the videos already in the server's media folder. */
function showMediaFolder() {
  $("form-error").hidden = true;
  return listMediaFiles($("media-list"), showFormError);
}

/** Binds the form; a webcam stream's pump goes into `pumps` (stream id -> WebcamPump), and `onCreated(id)` opens the
 * stream created. */
export function bindStreamForm({ pumps, onCreated }) {
  document.querySelectorAll('input[name="kind"]').forEach((r) => r.addEventListener("change", showKindFields));
  $("kind-url").addEventListener("change", () => suggestMediaFiles($("media-files")));
  $("kind-file").addEventListener("change", showMediaFolder);
  showKindFields();
  $("stream-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const button = $("start-button");
    $("form-error").hidden = true;
    button.disabled = true;
    try {
      const spec = streamSpec();
      const file = chosenFile();
      if (file) {
        spec.source = await sendVideo(file, button);
        showMediaFolder();
      }
      const stream = await api.create(spec);
      if (spec.source === "webcam") {
        try {
          pumps.set(stream.id, await WebcamPump.start(stream.id, spec, (msg) => ($("live-sub").textContent = msg)));
        } catch (err) {
          await api.remove(stream.id).catch(() => {});
          throw err;
        }
      }
      await onCreated(stream.id);
    } catch (err) {
      showFormError(err);
    } finally {
      button.disabled = false;
    }
  });
}
