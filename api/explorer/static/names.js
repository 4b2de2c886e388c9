// Entity boxes that take a name: a combobox (ARIA 1.2 pattern) over GET /v1/entities?q=, which finds refs,
// labels and aliases (CJK or Latin). Up/Down move through the suggestions, Enter picks one, Escape closes them.
// A typed ref is taken as it is; a name is resolved when the suggestions show exactly one entity for it, or
// one whose label, alias or ref is exactly the text; otherwise the page names the candidates.

import { api, ApiError } from "./api.js";

const REF = /^[a-z][a-z0-9_-]*:\S+$/;
let counter = 0;

function el(tag, attributes = {}, text = "") {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text) node.textContent = text;
  return node;
}

// Find the one entity `text` names; throws an ApiError listing the candidates when it names several or none.
export async function resolveName(text, known) {
  const wanted = text.trim();
  if (!wanted) return null;
  if (REF.test(wanted)) return wanted;
  const found = (await api.entities(wanted, 8)).data;
  for (const e of found) known.set(e.ref, e);
  const folded = wanted.toLowerCase();
  const exact = found.filter((e) => e.ref.toLowerCase() === folded || e.label.toLowerCase() === folded
    || (e.aliases || []).some((a) => a.toLowerCase() === folded));
  if (exact.length === 1) return exact[0].ref;
  if (found.length === 1) return found[0].ref;
  const candidates = (exact.length ? exact : found).map((e) => `${e.label} (${e.ref})`).join("; ");
  throw new ApiError(0, `“${wanted}” is ${found.length ? "ambiguous" : "unknown"}`, found.length
    ? `it names several entities: ${candidates}. Pick one from the suggestions (Up/Down, Enter).`
    : "no entity has that name, alias or ref.");
}

// Turn `input` into a combobox. `onPick(entity)` is called with {ref, label} once one is chosen.
export function nameBox(input, known, onPick, { keep = true } = {}) {
  const id = `${input.id}-suggestions`;
  const list = el("ul", { id, role: "listbox", class: "suggestions", "aria-label": "Suggestions" });
  list.hidden = true;
  // over what follows, not in its flow: opening and closing it moves nothing (a button under the pointer stays
  // where it was between the press and the release of a click)
  const box = el("div", { class: "namebox" });
  input.replaceWith(box);
  box.append(input, list);
  input.setAttribute("role", "combobox");
  input.setAttribute("aria-autocomplete", "list");
  input.setAttribute("aria-expanded", "false");
  input.setAttribute("aria-controls", id);
  input.removeAttribute("list");
  let options = [];
  let active = -1;
  let timer = null;
  let asked = 0;

  const close = () => {
    clearTimeout(timer);  // a pending or answering lookup must not open it again
    asked += 1;
    list.hidden = true;
    input.setAttribute("aria-expanded", "false");
    input.removeAttribute("aria-activedescendant");
    active = -1;
  };
  const highlight = (index) => {
    active = index;
    for (const [k, option] of [...list.children].entries()) option.setAttribute("aria-selected", String(k === index));
    if (index >= 0) {
      input.setAttribute("aria-activedescendant", list.children[index].id);
      list.children[index].scrollIntoView({ block: "nearest" });
    } else {
      input.removeAttribute("aria-activedescendant");
    }
  };
  const pick = (entity) => {
    known.set(entity.ref, entity);
    input.value = keep ? entity.label : "";
    input.dataset.ref = keep ? entity.ref : "";
    input.dataset.picked = keep ? entity.label : "";
    close();
    onPick(entity);
  };
  const show = (found) => {
    options = found;
    list.replaceChildren(...found.map((e, k) => {
      const option = el("li", { id: `${id}-${counter++}`, role: "option", "aria-selected": "false" });
      option.append(el("span", { class: "name" }, e.label), el("span", { class: "ref" }, ` ${e.ref}`));
      option.addEventListener("mousedown", (event) => {
        event.preventDefault();  // keep the focus in the box
        pick(e);
      });
      return option;
    }));
    list.hidden = !found.length;
    input.setAttribute("aria-expanded", String(Boolean(found.length)));
    highlight(-1);
  };
  const ask = async (text) => {
    const mine = ++asked;
    const found = (await api.entities(text, 8)).data;
    if (mine !== asked) return options;
    for (const e of found) known.set(e.ref, e);
    show(found);
    return found;
  };

  input.addEventListener("input", () => {
    delete input.dataset.ref;
    clearTimeout(timer);
    const text = input.value.trim();
    if (!text) {
      close();
      return;
    }
    timer = setTimeout(() => ask(text).catch(() => close()), 120);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      if (list.hidden) {
        clearTimeout(timer);
        if (input.value.trim()) ask(input.value.trim()).then(() => highlight(0)).catch(() => close());
        return;
      }
      const step = event.key === "ArrowDown" ? 1 : -1;
      highlight(Math.max(0, Math.min(options.length - 1, active + step)));
    } else if (event.key === "Escape" && !list.hidden) {
      event.preventDefault();
      event.stopPropagation();
      close();
    } else if (event.key === "Enter" && !list.hidden && active >= 0) {
      event.preventDefault();
      pick(options[active]);
    }
  });
  // leaving the box closes its suggestions (after a moment: a click on one lands first), unless it comes back
  let leaving = null;
  input.addEventListener("blur", () => { leaving = setTimeout(close, 150); });
  input.addEventListener("focus", () => clearTimeout(leaving));
  return { close, pick };
}

// The ref an entity box stands for: the picked entity if its name is still there, else the text resolved.
export async function boxRef(input, known) {
  const text = input.value.trim();
  if (!text) return null;
  if (input.dataset.ref && input.dataset.picked === text) return input.dataset.ref;
  return resolveName(text, known);
}
