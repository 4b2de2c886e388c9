// Curation from the "why" panel: invalidate a fact (with a reason), correct its value, forget it, forget a
// person. Each action first shows a confirmation that says exactly what will be written (and, for a forget,
// that it cannot be undone, confirmed by typing); then it calls the public API with this tab's key, so the key's
// rights decide (an agent-scoped key may not invalidate or forget: the API's refusal is shown in words) and every
// change is an event in the log like any other write.

import { api, ApiError } from "./api.js";
import { boxRef, nameBox } from "./names.js";

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// What each action writes, in words, for the confirmation.
function consequences(action, fact, labelOf, extra = {}) {
  const said = `“${labelOf(fact.subject)} —${fact.relation}→ ${labelOf(fact.object)}”`;
  switch (action) {
    case "invalidate":
      return `Invalidate ${said}: one fact.invalidated event with your reason. The fact leaves every current`
        + " perspective and search; its history keeps it (what was believed before stays answerable).";
    case "correct":
      return `Correct ${said} to “${labelOf(fact.subject)} —${fact.relation}→ ${extra.to || "…"}”: a`
        + " fact.asserted event for the new value (same subject, relation and scope, your reason), then a"
        + " fact.invalidated event ending this one (unless the relation is functional: the new value then"
        + " supersedes it in the same write).";
    case "forget-fact":
      return `Forget ${said} for good: its content (reason and provenance text) is erased from every copy by`
        + " deleting its key (crypto-shredding); its id, relation, ends and times stay. This cannot be undone.";
    case "forget-person":
      return `Forget ${extra.label} (${extra.ref}) for good: every content sealed with their key — their facts'`
        + " reasons, their sessions' messages, their private memories — is erased from every copy, and writes"
        + ` about them are refused until they are registered anew. This cannot be undone.`;
    default:
      return "";
  }
}

// The curation section of a fact's panel. `done(result)` is called after a write (to redraw the views).
export function curationSection(fact, { known, labelOf, done, report }) {
  const current = fact.current;
  const box = el("div", { id: "curate-form", class: "curate-form", hidden: true });
  const section = el("section", { class: "curate", "aria-labelledby": "curate-title" },
    el("h3", { id: "curate-title" }, "Curate"));
  const persons = [...new Set([current.subject, current.object])].filter((ref) => ref.startsWith("person:"));
  const buttons = [];
  if (current.status === "current") {
    buttons.push(["invalidate", "Invalidate…"], ["correct", "Correct the value…"]);
  }
  buttons.push(["forget-fact", "Forget this fact…"]);
  for (const ref of persons) buttons.push([`forget-person:${ref}`, `Forget ${labelOf(ref)}…`]);
  section.append(el("div", { class: "buttons" }, buttons.map(([action, text]) => el("button", {
    type: "button", "data-action": action, onclick: () => open(action) }, text))), box);

  function open(action) {
    const person = action.startsWith("forget-person:") ? action.slice("forget-person:".length) : null;
    const kind = person ? "forget-person" : action;
    const extra = person ? { ref: person, label: labelOf(person) } : {};
    const what = el("p", { id: "curate-what", class: "what" }, consequences(kind, current, labelOf, extra));
    const fields = [];
    let reason = null;
    let value = null;
    let typed = null;
    if (kind === "invalidate" || kind === "correct") {
      reason = el("textarea", { id: "curate-reason", rows: "2", required: true });
      fields.push(el("label", { for: "curate-reason" }, "Reason (recorded with the change)"), reason);
    }
    if (kind === "correct") {
      value = el("input", { id: "curate-value", placeholder: "the right value: a name or ref", spellcheck: "false",
                            autocomplete: "off" });
      fields.unshift(el("label", { for: "curate-value" }, `New ${current.relation} of ${labelOf(current.subject)}`),
                     value);
      value.addEventListener("input", () => {
        what.textContent = consequences(kind, current, labelOf, { to: value.value.trim() });
      });
    }
    const word = person || "FORGET";
    if (kind.startsWith("forget")) {
      typed = el("input", { id: "curate-typed", spellcheck: "false", autocomplete: "off" });
      fields.push(el("label", { for: "curate-typed" }, `Type ${word} to confirm`), typed);
    }
    const confirm = el("button", { type: "submit", id: "curate-confirm" }, {
      invalidate: "Confirm: invalidate", correct: "Confirm: correct", "forget-fact": "Confirm: forget this fact",
      "forget-person": `Confirm: forget ${extra.label}` }[kind]);
    const form = el("form", { autocomplete: "off", "aria-describedby": "curate-what" }, what, ...fields,
      el("div", { class: "buttons" }, confirm,
         el("button", { type: "button", onclick: () => { box.hidden = true; box.replaceChildren(); } }, "Cancel")));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      report(async () => {
        if (typed && typed.value.trim() !== word) {
          throw new ApiError(0, "Not confirmed", `type ${word} exactly to confirm; nothing was written`);
        }
        if (reason && !reason.value.trim()) {
          throw new ApiError(0, "No reason", "say why: the reason is recorded with the change; nothing was written");
        }
        const result = await run(kind, { reason: reason?.value.trim(), value, person });
        box.hidden = true;
        box.replaceChildren();
        await done(result);
      });
    });
    box.replaceChildren(form);
    box.hidden = false;
    if (value) nameBox(value, known, () => {
      what.textContent = consequences(kind, current, labelOf, { to: value.value.trim() });
    });
    (value || reason || typed).focus();
  }

  async function run(kind, { reason, value, person }) {
    if (kind === "invalidate") {
      const written = await api.invalidate(fact.fact_id, reason);
      return { action: kind, fact_id: fact.fact_id, writes: [written] };
    }
    if (kind === "correct") {
      const object = await boxRef(value, known);
      if (!object) throw new ApiError(0, "No value", "name the right value first; nothing was written");
      const asserted = await api.assertFact({ subject: current.subject, relation: current.relation, object,
                                              scope: current.scope, reason });
      const writes = [asserted];
      if (asserted.supersedes !== fact.fact_id && asserted.fact_id !== fact.fact_id) {
        writes.push(await api.invalidate(fact.fact_id, `corrected to ${object}: ${reason}`));
      }
      return { action: kind, fact_id: fact.fact_id, new_fact_id: asserted.fact_id, writes };
    }
    const subject = kind === "forget-fact" ? `fact:${fact.fact_id}` : person;
    const forgotten = await api.forget(subject);
    return { action: kind, subject, fact_id: fact.fact_id, writes: [forgotten] };
  }
  return section;
}
