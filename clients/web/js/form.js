// The new-stream form as data: which fields show for the chosen source kind, and the POST /api/streams body it
// describes (throws with a message the form shows when something is missing).
const $ = (id) => document.getElementById(id);

function selectedKind() {
  return document.querySelector('input[name="kind"]:checked').value;
}

export function showKindFields() {
  const kind = selectedKind();
  document
    .querySelectorAll("#stream-form [data-for]")
    .forEach((node) => (node.hidden = !node.dataset.for.split(" ").includes(kind)));
}

/** The POST /api/streams body. Unset fields are left to the server: the rate follows the source, and the learning
 * size follows the frame budget ("auto"). A file from this computer has no source yet: `chosenFile` is sent first. */
export function streamSpec() {
  const kind = selectedKind();
  const spec = { stages: Number($("stages").value), init: $("init").value };
  if ($("fps").value) spec.fps = Number($("fps").value);
  if ($("size").value !== "auto") [spec.width, spec.height] = $("size").value.split("x").map(Number);
  if ($("lr").value) spec.lr = Number($("lr").value);
  const name = $("name").value.trim();
  if (name) spec.name = name;
  if (kind === "demo") spec.source = "demo";
  else if (kind === "webcam") spec.source = "webcam";
  else if (kind === "camera") spec.source = `camera:${Number($("camera-index").value) || 0}`;
  else if (kind === "file") {
    spec.loop = $("loop").checked;
    if (!$("source-file").files.length) throw new Error("choose a video file first");
  } else {
    spec.source = $("source-url").value.trim();
    spec.loop = $("loop").checked;
    if (!spec.source) throw new Error("type a video URL first");
  }
  return spec;
}

/** The video chosen on the File tab, or null on any other. */
export function chosenFile() {
  return selectedKind() === "file" ? $("source-file").files[0] : null;
}
