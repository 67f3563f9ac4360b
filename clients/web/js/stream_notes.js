// What the page says of a stream in words under its title, besides its settings: the frame budget and its notes.

const NOTES_SHOWN = 3; // the stream's newest notes on the page (the API has them all)

/** The frame budget in words, red where frames are dropped or a smaller size is coming. */
export function renderBudgetNote(element, note) {
  element.hidden = !note;
  element.textContent = note || "";
  element.classList.toggle("over", /cannot keep|a smaller size/.test(note || ""));
}

/** What the stream did on its own (went back to its best weights, recovered from a bad loss): the newest few. */
export function renderNotes(list, notes) {
  const item = (text, className = "") => Object.assign(document.createElement("li"), { textContent: text, className });
  const items = notes.slice(-NOTES_SHOWN).map((text) => item(text));
  const earlier = notes.length - items.length;
  if (earlier) items.unshift(item(`${earlier} earlier`, "muted"));
  list.replaceChildren(...items);
  list.hidden = !notes.length;
}
