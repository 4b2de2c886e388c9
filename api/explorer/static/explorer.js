// The explorer page: standpoint, time, why, search and context, over the public /v1 API only.
// Everything drawn is also exposed as data on window.__explorer (the browser tests read it, not pixels).

import { api, ApiError, key, pending } from "./api.js";
import { boxRef, nameBox, resolveName } from "./names.js";
import { curationSection } from "./curate.js";
import { DRAW_CAP, drawGraph, edgesThroughNodes, perspectiveModel, placeLabels, renderedLabels } from "./graph.js";

const $ = (id) => document.getElementById(id);
const MAX_MOMENTS = 400;
const GRAPH_PAGES = 10;

const state = {
  cytoscape: null, cy: null, perspective: null, model: null, items: new Map(), previous: null,
  moments: [], focus: [], known: new Map(), hits: new Map(), valid: null, selected: null, sequence: 0,
  searchAvailable: false, playing: null, expanded: new Set(), cursor: null, drawCap: DRAW_CAP,
};
const exposed = {
  ready: false, busy: false, renders: 0, nodes: [], edges: [], perspective: null, lastRender: null,
  changes: null, moments: [], searchAvailable: false, hits: {}, valid: null, problem: null, fact: null,
  context: null, clusters: [], cap: null, timings: [],
};
window.__explorer = exposed;
// What cytoscape renders of each node's label (shown or not, and where), for the tests.
// What the page is waiting on: the requests not yet answered and for how long (ms).
exposed.waiting = () => [...pending.values()].map(({ request, sent }) => ({ request, ms: performance.now() - sent }));
exposed.labels = () => (state.cy ? renderedLabels(state.cy) : []);
exposed.crossings = () => (state.cy ? edgesThroughNodes(state.cy) : []);
// Zoom about the drawing's centre, and tap an element, as a person would (tests, tools).
exposed.zoom = (level) => state.cy?.zoom({ level, renderedPosition: { x: state.cy.width() / 2,
                                                                     y: state.cy.height() / 2 } });
exposed.tap = (id) => state.cy?.$id(id).emit("tap");
// A lower drawing cap, to see the held-back groups on a small tenant (tests, demos); redraws the view.
exposed.setDrawCap = (cap) => {
  state.drawCap = cap;
  state.expanded = new Set();
  if (!state.perspective) return;
  state.model = perspectiveModel(state.perspective, state.known, state.expanded, state.drawCap);
  drawModel();
  exposeModel();
  renderSummary(state.perspective, $("summary").dataset.live === "true", state.observing);
};
// Where each drawn node is, relative to the standpoint's centre (the tests check that rings grow with hops).
exposed.radii = () => {
  if (!state.cy) return {};
  const centre = state.cy.nodes("[ring = 0]").boundingBox();
  const cx = (centre.x1 + centre.x2) / 2;
  const cy = (centre.y1 + centre.y2) / 2;
  return Object.fromEntries(state.cy.nodes().map((n) => [n.id(), Math.hypot(n.position("x") - cx,
                                                                            n.position("y") - cy)]));
};

// ------------------------------------------------------------------------------------------------ helpers

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function when(iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : `${date.toISOString().slice(0, 16).replace("T", " ")} UTC`;
}

function labelOf(ref) {
  return state.known.get(ref)?.label || state.model?.nodes.find((n) => n.id === ref)?.label || ref;
}

function showProblem(error) {
  const box = $("problem");
  if (!error) {
    box.hidden = true;
    box.textContent = "";
    exposed.problem = null;
    return;
  }
  const words = error instanceof ApiError
    ? `${error.title ? `${error.title}: ` : ""}${error.detail || error.message}`
    : `Something went wrong in the page: ${error.message || error}`;
  box.textContent = words;
  box.hidden = false;
  exposed.problem = words;
}

// Busy while any guarded action runs: two at once (a focus name resolving while a view is asked) must not let the
// first to finish say the page is idle.
let running = 0;

async function guarded(action) {
  running += 1;
  exposed.busy = true;
  try {
    showProblem(null);
    return await action();
  } catch (error) {
    showProblem(error);
    return undefined;
  } finally {
    running -= 1;
    exposed.busy = running > 0;
  }
}

function selectTab(name) {
  for (const tab of ["items", "details", "context", "session"]) {
    const selected = tab === name;
    $(`tab-${tab}`).setAttribute("aria-selected", String(selected));
    $(`tab-${tab}`).tabIndex = selected ? 0 : -1;
    $(`panel-${tab}`).hidden = !selected;
  }
}

// ------------------------------------------------------------------------------------------------ the key

async function useKey(value) {
  key.set(value);
  const agents = await api.entitiesOfKind("agent").catch((error) => {
    key.clear();
    throw error;
  });
  const select = $("agent");
  select.replaceChildren(...agents.data.filter((e) => e.ref.startsWith("agent:"))
    .map((e) => el("option", { value: e.ref }, `${e.label} (${e.ref})`)));
  if (!select.options.length) select.append(el("option", { value: "" }, "(no agents in this tenant)"));
  for (const e of agents.data) state.known.set(e.ref, e);
  $("key-status").textContent = `Using key ${value.split("_").slice(0, 2).join("_")}…`;
  $("forget-key").hidden = false;
  $("api-key").value = "";
  await Promise.all([loadMoments(), probeSearch()]);
}

async function probeSearch() {
  // The search route answers 422 to an empty body when it exists, 404 when it has not landed.
  try {
    await api.search({});
    state.searchAvailable = true;
  } catch (error) {
    state.searchAvailable = error instanceof ApiError && error.status !== 404 && error.status !== 405;
  }
  $("search-form").hidden = !state.searchAvailable;
  exposed.searchAvailable = state.searchAvailable;
  const agent = $("agent").value;
  if (state.searchAvailable && agent) {
    // The server builds a tenant's search index on its first search (seconds on a large tenant): ask one
    // observer's search now, in the background and recording nothing, so the first real one is answered at once.
    exposed.warming = api.search({ agent, query: "warm up", k: 1, record: false }).then(() => true, () => false);
  }
}

// ------------------------------------------------------------------------------------------------ time

async function loadMoments() {
  // The slider's steps: every moment a belief in the graph began (recorded_from) or was first asserted.
  const seen = new Set();
  for (let page = 0; page < GRAPH_PAGES; page++) {
    const graph = await api.graph({ skip: page * 1000, limit: 1000 });
    for (const fact of graph.data) {
      for (const moment of [fact.recorded_from, fact.asserted_at]) {
        if (moment) seen.add(Math.floor(new Date(moment).getTime() / 60000) * 60000);
      }
    }
    if ((page + 1) * 1000 >= graph.count) break;
  }
  let moments = [...seen].sort((a, b) => a - b);
  if (moments.length > MAX_MOMENTS) {
    const step = moments.length / MAX_MOMENTS;
    moments = Array.from({ length: MAX_MOMENTS }, (_, i) => moments[Math.floor(i * step)]);
  }
  state.moments = moments;
  exposed.moments = moments.map((m) => new Date(m).toISOString());
  const slider = $("believed");
  slider.max = String(moments.length);
  slider.value = String(moments.length);
  slider.disabled = moments.length === 0;
  $("play").disabled = $("now").disabled = moments.length === 0;
  describeSlider();
}

function believedAt() {
  // null: live. A moment is the minute a belief began; ask for the end of that minute.
  const index = Number($("believed").value);
  return index >= state.moments.length ? null : new Date(state.moments[index] + 59_000).toISOString();
}

function describeSlider() {
  const at = believedAt();
  const text = at ? `believed at ${when(at)}` : "now (live)";
  $("believed-value").textContent = text;
  $("believed").setAttribute("aria-valuetext", text);
}

function trueAt() {
  const value = $("true-at").value;
  return value ? new Date(`${value}:00Z`).toISOString() : null;
}

// ------------------------------------------------------------------------------------------------ standpoint

async function standpoint() {
  const agent = $("agent").value;
  if (!agent) throw new ApiError(0, "No agent", "pick an agent first (use an API key to list them)");
  const budget = Number($("budget").value) || undefined;
  await addTypedFocus();  // a name typed in the focus box and not yet added counts
  return { agent, serving: await boxRef($("serving"), state.known), focus: [...state.focus], budget_tokens: budget };
}

function addFocus(ref) {
  if (ref && !state.focus.includes(ref)) state.focus.push(ref);
  renderFocus();
}

async function addTypedFocus() {
  const input = $("focus-input");
  const text = input.value.trim();
  if (!text) return;
  addFocus(await resolveName(text, state.known));
  input.value = "";
}

function renderFocus() {
  $("focus-list").replaceChildren(...state.focus.map((ref) => el("li", {}, labelOf(ref),
    el("button", { type: "button", "aria-label": `Remove ${ref} from focus`, onclick: () => {
      state.focus = state.focus.filter((f) => f !== ref);
      renderFocus();
    } }, "×"))));
}


async function showPerspective({ record } = {}) {
  const params = await standpoint();
  const at = believedAt();
  const serve = record ?? $("record").checked;
  // Observing (the default) reads the same live view the agent would be served, with `record=false`: no recall is
  // recorded. Only a moment of the slider asks for `as_of` (a fold of the log up to then: slower, and never now).
  params.as_of = at;
  params.record = at || serve ? null : "false";
  params.min_position = state.curated?.position ?? null;  // read this tab's own curation
  const sequence = ++state.sequence;
  const asked = performance.now();
  const perspective = await api.perspective(params);
  if (sequence !== state.sequence) return;
  const answered = performance.now();
  await render(perspective, { live: !at, observing: !at && !serve });
  exposed.timings.push({ kind: at ? "as_of" : "live", request: answered - asked, total: performance.now() - asked });
}

function normalise(perspective) {
  return { perspective_id: perspective.perspective_id, agent: perspective.agent, serving: perspective.serving,
           focus: perspective.focus || [], as_of: perspective.as_of, deeper: perspective.deeper,
           items: perspective.items || [], count_groups: perspective.count_groups || [],
           counts: perspective.counts || {}, forgotten: perspective.forgotten ?? perspective.counts?.forgotten,
           context: perspective.context, parameters: perspective.parameters || {}, recall: perspective.recall ?? null,
           faded: perspective.faded || [] };
}

// ------------------------------------------------------------------------------------------------ drawing

async function render(raw, { live, observing } = {}) {
  const started = performance.now();
  const perspective = normalise(raw);
  const previous = state.perspective;
  const sameStandpoint = previous && previous.agent === perspective.agent && previous.serving === perspective.serving
    && JSON.stringify(previous.focus) === JSON.stringify(perspective.focus);
  if (!sameStandpoint) state.expanded = new Set();
  state.perspective = perspective;
  state.items = new Map(perspective.items.map((item) => [item.fact_id, item]));
  state.model = perspectiveModel(perspective, state.known, state.expanded, state.drawCap);
  // "Changed since the previous view" only between two views of the same agent from the same standpoint.
  const changes = sameStandpoint ? diff(previous, perspective) : null;
  const modelled = performance.now();
  renderSummary(perspective, live, observing);  // first: its height sets the drawing's
  drawModel();
  const laidOut = performance.now();
  renderItems(changes);
  const listed = performance.now();
  await new Promise((resolve) => requestAnimationFrame(() => resolve()));
  const ms = performance.now() - started;
  exposed.lastRender = { ms, items: perspective.items.length, nodes: state.model.nodes.length,
                         edges: state.model.edges.length, drawn: Boolean(state.cy),
                         parts: { model: modelled - started, graph: laidOut - modelled, list: listed - laidOut,
                                  frame: performance.now() - listed } };
  exposed.perspective = perspective;
  exposeModel();
  exposed.changes = changes;
  exposed.renders += 1;
  $("deeper").disabled = false;
  state.hits = new Map();
  exposed.hits = {};
  $("search-results").replaceChildren();
  $("search-results").hidden = true;
  if (changes) await explainChanges(changes);
  await applyValidTime();
  learnEntities();
}

let resizing = null;
const resized = new ResizeObserver(() => {
  // a narrower window, a rotated phone, a summary of another height: fit the drawing to its new box
  cancelAnimationFrame(resizing);
  resizing = requestAnimationFrame(() => {
    if (!state.cy) return;
    state.cy.resize();
    state.cy.fit(undefined, 12);
    placeLabels(state.cy);
  });
});

function drawModel() {
  if (!state.cytoscape) return;
  resized.observe($("graph"));
  state.cy = drawGraph(state.cytoscape, $("graph"), state.cy, state.model,
                       { onFact: (id) => guarded(() => openFact(id)), onEntity: refocus,
                         onCluster: (cluster) => guarded(() => openCluster(cluster)) });
  state.cursor = null;
  state.cy.on("tap", (event) => { if (event.target !== state.cy) moveCursor(event.target.id(), false); });
}

function exposeModel() {
  exposed.nodes = state.model.nodes;
  exposed.edges = state.model.edges;
  exposed.clusters = state.model.clusters;
  exposed.cap = state.model.cap;
}

async function openCluster(cluster) {
  // "N more about X": the API only counts them, so thinking about X (adding it to the focus) brings them into
  // view. "N more via X" (held back by the drawing cap): draw them.
  if (cluster.kind === "rest") {
    selectTab("items");
    $("counted")?.scrollIntoView({ block: "start" });
    $("counted")?.focus();
    return;
  }
  if (cluster.kind === "count") {
    if (!state.focus.includes(cluster.about) && cluster.about !== state.perspective.agent) {
      state.focus = [...state.focus, cluster.about];
      renderFocus();
    }
    await showPerspective();
    return;
  }
  for (const id of cluster.facts) state.expanded.add(id);
  state.model = perspectiveModel(state.perspective, state.known, state.expanded, state.drawCap);
  drawModel();
  exposeModel();
  renderSummary(state.perspective, $("summary").dataset.live === "true", state.observing);
  moveCursor(cluster.about, true);
}

// ------------------------------------------------------------------------------------------------ keyboard

const TIERS = { full: 0, gist: 1, marker: 2 };

// The fact a node's "why" opens: its strongest drawn fact, preferring the one towards the standpoint.
function factOf(ref) {
  const node = state.model.nodes.find((n) => n.id === ref);
  if (!node) return null;
  const ringOf = (id) => state.model.nodes.find((n) => n.id === id)?.ring ?? 99;
  const touching = state.model.edges.filter((e) => e.drawn && (e.source === ref || e.target === ref));
  touching.sort((a, b) => TIERS[a.tier] - TIERS[b.tier]
    || ringOf(a.source === ref ? a.target : a.source) - ringOf(b.source === ref ? b.target : b.source)
    || b.activation - a.activation);
  return touching[0] || null;
}

function describeCursor(element) {
  if (element.data("kind") !== "entity") return `${element.data("label")} (Enter: ${element.data("kind") === "count"
    ? "focus on it" : "draw them"})`;
  const fact = factOf(element.id());
  const item = fact && state.items.get(fact.id);
  const where = element.data("ring") === 0 ? element.data("role") : `${element.data("ring")} hop(s) away`;
  return `${element.data("label")} (${element.id()}, ${where})`
    + (item ? `; Enter: why ${item.subject_label} —${item.relation}→ ${item.object_label} (${item.tier},`
      + ` activation ${item.activation.toFixed(2)})` : "; no fact of this view touches it");
}

function moveCursor(id, show = true) {
  if (!state.cy) return;
  const target = state.cy.$id(id);
  if (!target.length || !target.isNode()) return;
  state.cy.nodes(".cursor").removeClass("cursor");
  target.addClass("cursor");
  state.cursor = id;
  exposed.cursor = id;
  $("graph-cursor").textContent = describeCursor(target);
  if (show) {
    const p = target.renderedPosition();
    const { clientWidth: w, clientHeight: h } = $("graph");
    if (p.x < 20 || p.y < 20 || p.x > w - 20 || p.y > h - 20) state.cy.center(target);
    placeLabels(state.cy);
  }
}

// Arrow keys move to the nearest node in that direction (on screen), Enter opens its "why", Home the agent.
function graphKey(event) {
  if (!state.cy) return;
  const directions = { ArrowRight: [1, 0], ArrowLeft: [-1, 0], ArrowDown: [0, 1], ArrowUp: [0, -1] };
  if (event.key === "Home" || (!state.cursor && directions[event.key])) {
    event.preventDefault();
    moveCursor(state.perspective.agent);
    return;
  }
  if (directions[event.key]) {
    event.preventDefault();
    const [dx, dy] = directions[event.key];
    const from = state.cy.$id(state.cursor).renderedPosition();
    let best = null;
    for (const n of state.cy.nodes()) {
      if (n.id() === state.cursor) continue;
      const p = n.renderedPosition();
      const along = (p.x - from.x) * dx + (p.y - from.y) * dy;
      const across = Math.abs((p.x - from.x) * dy - (p.y - from.y) * dx);
      if (along <= 0 || across > along * 2) continue;
      const cost = along + across * 2;
      if (!best || cost < best.cost) best = { cost, id: n.id() };
    }
    if (best) moveCursor(best.id);
    return;
  }
  if (event.key === "Enter" && state.cursor) {
    event.preventDefault();
    const node = state.cy.$id(state.cursor);
    if (node.data("kind") !== "entity") {
      guarded(() => openCluster(node.data()));
      return;
    }
    const fact = factOf(state.cursor);
    state.returnTo = "graph";
    if (fact) guarded(() => openFact(fact.id));
  }
}

function diff(before, after) {
  const old = new Map(before.items.map((i) => [i.fact_id, i]));
  const now = new Map(after.items.map((i) => [i.fact_id, i]));
  return {
    appeared: [...now.keys()].filter((id) => !old.has(id)),
    corroborated: [...now.keys()].filter((id) => old.has(id) && now.get(id).confidence > old.get(id).confidence),
    gone: [...old.keys()].filter((id) => !now.has(id)).map((id) => ({ ...old.get(id), why: null })),
  };
}

async function explainChanges(changes) {
  // Why a fact left the view: superseded, invalidated, not yet believed, or ranked out at that moment.
  const at = believedAt();
  const moment = at ? new Date(at).getTime() : Infinity;
  await Promise.all(changes.gone.slice(0, 12).map(async (item) => {
    try {
      const fact = await api.fact(item.fact_id);
      const version = fact.versions.find((v) => new Date(v.recorded_from).getTime() <= moment
        && (!v.recorded_to || moment < new Date(v.recorded_to).getTime()));
      item.why = !version ? "not yet believed then"
        : version.status === "current" ? "still believed, ranked out of this view"
          : version.superseded_by ? `superseded by ${version.superseded_by.slice(0, 8)}`
            + (version.ended_reason ? ` (${version.ended_reason})` : "")
            : `${version.status}${version.ended_reason ? `: ${version.ended_reason}` : ""}`;
    } catch (error) {
      item.why = error.message;
    }
  }));
  const box = $("changes");
  const line = (item, mark, cls) => el("li", { class: cls },
    `${mark} ${item.subject_label} —${item.relation}→ ${item.object_label}`, item.why ? ` (${item.why})` : "");
  const appeared = changes.appeared.map((id) => state.items.get(id));
  const corroborated = changes.corroborated.map((id) => state.items.get(id));
  if (!appeared.length && !corroborated.length && !changes.gone.length) {
    box.replaceChildren();
    return;
  }
  box.replaceChildren(el("strong", {}, "Changed since the previous view"), el("ul", {},
    appeared.map((i) => line(i, "+", "new")), corroborated.map((i) => line(i, "↑ corroborated:", "")),
    changes.gone.map((i) => line(i, "−", "gone"))));
  exposed.changes = { appeared: changes.appeared, corroborated: changes.corroborated,
                      gone: changes.gone.map((i) => ({ fact_id: i.fact_id, why: i.why })) };
  if (state.cy) {
    for (const id of changes.appeared) state.cy.$id(id).addClass("appeared");
    for (const id of changes.corroborated) state.cy.$id(id).addClass("corroborated");
  }
}

function renderSummary(perspective, live, observing) {
  state.observing = observing;
  const counts = perspective.counts || {};
  const parts = [el("strong", {}, labelOf(perspective.agent))];
  if (perspective.serving) parts.push(` serving ${labelOf(perspective.serving)}`);
  if (perspective.focus.length) parts.push(`, focus ${perspective.focus.map(labelOf).join(", ")}`);
  parts.push(observing ? " · now, observed (no recall recorded)" : perspective.as_of
    ? ` · believed at ${when(perspective.as_of)}` : " · now, served as the agent (recorded as a recall)");
  if (perspective.deeper) parts.push(" · deeper");
  parts.push(` · ${counts.full ?? 0} full, ${counts.gist ?? 0} gist, ${counts.marker ?? 0} marker,`
    + ` ${counts.count ?? 0} counted, ${counts.forgotten ?? perspective.forgotten ?? 0} forgotten`);
  const cap = state.model?.cap;
  if (cap && cap.countGroups > cap.countNodes) {
    parts.push(el("span", { class: "capped" }, ` · ${cap.countNodes} of ${cap.countGroups} counted groups drawn`
      + " (the largest; the list has all)"));
  }
  if (cap && cap.heldEdges) {
    parts.push(el("span", { class: "capped", id: "capped" }, ` · drawn: ${cap.drawnNodes} of ${cap.nodes} entities`
      + ` (at most ${cap.cap}); ${cap.heldEdges} weaker markers held back in ${cap.groups} grey nodes: tap one,`
      + " or Enter on it, to draw them; the list has them all"));
  }
  parts.push(el("span", { class: "ids" }, ` · perspective ${perspective.perspective_id}`));
  if (!state.cytoscape) parts.push(el("div", {}, "(graph library missing: the list shows the items)"));
  $("summary").replaceChildren(...parts);
  $("summary").dataset.live = String(Boolean(live));
}

function itemButton(item) {
  const why = item.tier === "full" ? item.reason || "(no reason recorded)"
    : item.tier === "gist" ? item.reason || "" : "";
  return el("button", { type: "button", class: "item", dataset: { factId: item.fact_id, tier: item.tier },
                        onclick: () => { state.returnTo = "list"; guarded(() => openFact(item.fact_id)); } },
    el("span", { class: "score", title: "activation A = B + ln(confidence) + spread" },
       `A ${item.activation.toFixed(2)}`),
    `${item.subject_label} —${item.relation}→ ${item.object_label}`,
    why ? el("span", { class: "why" }, why) : null,
    item.salience ? el("span", { class: "why salience" }, item.salience) : null);
}

function renderItems(changes) {
  const list = $("items");
  const groups = [];
  for (const tier of ["full", "gist", "marker"]) {
    const items = state.perspective.items.filter((i) => i.tier === tier);
    if (!items.length) continue;
    groups.push(el("li", {}, el("h3", {}, `${tier} (${items.length})`),
                   el("ul", { class: "items" }, items.map((i) => el("li", {}, itemButton(i))))));
  }
  const counted = state.perspective.count_groups;
  if (counted.length) {
    groups.push(el("li", {}, el("h3", { id: "counted", tabindex: "-1" }, "counted"), el("ul", { class: "items" },
      counted.map((g) => el("li", { dataset: { about: g.about } }, `${g.count} more about ${g.label}`)))));
  }
  const forgotten = state.perspective.counts.forgotten ?? state.perspective.forgotten ?? 0;
  // the strongest forgotten facts, with why they faded, as the API says it (the rest are only counted)
  const faded = state.perspective.faded || [];
  groups.push(el("li", {}, el("h3", {}, "forgotten"), `${forgotten} below the threshold`
    + (faded.length ? `; the strongest ${faded.length}, and why they faded:` : ""),
  faded.length ? el("ul", { class: "items faded", id: "faded" }, faded.map((f) => el("li", { dataset: { factId: f.fact_id } },
    el("button", { type: "button", class: "link", onclick: () => guarded(() => openFact(f.fact_id)) },
       `${f.subject_label} —${f.relation}→ ${f.object_label}`),
    el("span", { class: "score", title: "activation A (below the threshold)" }, ` A ${f.activation.toFixed(2)}`),
    f.salience ? el("span", { class: "why salience" }, f.salience) : null))) : null));
  list.replaceChildren(...groups);
  if (!changes) $("changes").replaceChildren();
  if (changes) {
    for (const id of changes.appeared) list.querySelector(`[data-fact-id="${id}"]`)?.classList.add("appeared");
    for (const id of changes.corroborated) {
      list.querySelector(`[data-fact-id="${id}"]`)?.classList.add("corroborated");
    }
  }
}

async function applyValidTime() {
  // "True at": which drawn facts held in the world then, as believed at the slider's moment (GET /v1/graph).
  const at = trueAt();
  const status = $("valid-status");
  for (const node of document.querySelectorAll(".item.not-valid")) node.classList.remove("not-valid");
  state.cy?.edges().removeClass("not-valid");
  if (!at || !state.perspective) {
    state.valid = null;
    exposed.valid = null;
    status.textContent = "";
    return;
  }
  const wanted = new Set(state.items.keys());
  const held = new Set();
  for (let page = 0; page < GRAPH_PAGES && wanted.size; page++) {
    const graph = await api.graph({ recorded_at: believedAt(), valid_at: at, skip: page * 1000, limit: 1000 });
    for (const fact of graph.data) {
      if (wanted.delete(fact.fact_id)) held.add(fact.fact_id);
    }
    if ((page + 1) * 1000 >= graph.count) break;
  }
  const notValid = [...state.items.keys()].filter((id) => !held.has(id));
  for (const id of notValid) {
    state.cy?.$id(id).addClass("not-valid");
    $("items").querySelector(`[data-fact-id="${id}"]`)?.classList.add("not-valid");
  }
  state.valid = { at, held: [...held], notValid };
  exposed.valid = state.valid;
  status.textContent = `${held.size} of ${state.items.size} drawn facts held at ${when(at)}; the others are`
    + " drawn dashed and struck through.";
}

async function learnEntities() {
  // Labels and hub flags of drawn entities not seen yet (a hub is drawn as a stop point).
  const unknown = (state.model?.nodes || []).map((n) => n.id).filter((ref) => !state.known.has(ref));
  const queue = [...unknown];
  const worker = async () => {
    while (queue.length) {
      const ref = queue.shift();
      try {
        state.known.set(ref, await api.entity(ref));
      } catch {
        state.known.set(ref, { ref, label: ref, hub: false });
      }
    }
  };
  await Promise.all(Array.from({ length: 4 }, worker));
  if (!unknown.length || !state.model) return;
  for (const node of state.model.nodes) {
    const entity = state.known.get(node.id);
    if (!entity) continue;
    node.hub = Boolean(entity.hub);
    if (node.label === node.id && entity.label) {
      node.label = entity.label;
      node.display = node.more ? `${node.label}\n${node.more} more` : node.label;
    }
    state.cy?.$id(node.id).data({ hub: node.hub, label: node.label, display: node.display });
  }
  if (state.cy) placeLabels(state.cy);
  exposed.nodes = state.model.nodes;
}

// ------------------------------------------------------------------------------------------------ why

function row(...cells) {
  return el("tr", {}, cells.map((c) => el("td", {}, c)));
}

async function openFact(factId) {
  selectTab("details");
  const panel = $("panel-details");
  panel.replaceChildren(el("p", { class: "help" }, "Loading the fact's history…"));
  state.selected = factId;
  state.cy?.elements().unselect();
  state.cy?.$id(factId).select();
  for (const b of document.querySelectorAll(".items button.item")) {
    b.setAttribute("aria-current", String(b.dataset.factId === factId));
  }
  const fact = await api.fact(factId, state.curated?.position);
  const item = state.items.get(factId);
  const current = fact.current;
  const entityButton = (ref) => el("button", { type: "button", class: "link",
                                               onclick: () => refocus(ref) }, labelOf(ref));
  const parts = [
    el("h2", { id: "fact-title" }, labelOf(current.subject), ` —${current.relation}→ `, labelOf(current.object)),
    el("p", { class: "ids" }, `fact ${factId} · scope ${current.scope} · now ${current.status}`),
    el("p", {}, "Focus on ", entityButton(current.subject), " or ", entityButton(current.object)),
  ];
  if (item) {
    const lnC = Math.log(item.confidence);
    const spreadTerm = item.activation - item.base_level - lnC;
    parts.push(el("h3", {}, `In this view: ${item.tier}`), el("dl", { class: "breakdown", id: "breakdown" },
      el("dt", {}, "activation A"), el("dd", {}, item.activation.toFixed(3)),
      el("dt", {}, "base level B"), el("dd", {}, item.base_level.toFixed(3)),
      el("dt", {}, "ln confidence"), el("dd", {}, `${lnC.toFixed(3)} (confidence ${item.confidence})`),
      el("dt", {}, "spread S + ln x"), el("dd", {}, `${spreadTerm.toFixed(3)} (x = ${item.spread.toPrecision(3)})`),
      el("dt", {}, "hops"), el("dd", {}, String(item.hops)),
      el("dt", {}, "path"), el("dd", {}, item.path.map(labelOf).join(" → ")),
      item.salience ? el("dt", {}, "why this clear") : null,
      item.salience ? el("dd", { id: "salience" }, item.salience) : null,
    ));
    const via = item.path_fact_ids.filter((id) => id !== factId);
    if (via.length) {
      parts.push(el("p", {}, "Reached through ", via.map((id) => el("button", {
        type: "button", class: "link", onclick: () => guarded(() => openFact(id)) }, id.slice(0, 8))), "."));
    }
  } else {
    parts.push(el("p", { class: "help" }, "Not an item of the perspective drawn now."));
  }
  parts.push(el("h3", {}, "Versions on both time axes"), el("table", { id: "versions" },
    el("thead", {}, el("tr", {}, ["v", "status", "conf.", "true from → to", "believed from → to", "reason"]
      .map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, fact.versions.map((v) => row(String(v.version), v.status, v.confidence.toFixed(2),
      `${when(v.valid_from)} → ${v.valid_to ? when(v.valid_to) : "open"}`,
      `${when(v.recorded_from)} → ${v.recorded_to ? when(v.recorded_to) : "now"}`,
      [v.reason || "", v.ended_reason ? ` (ended: ${v.ended_reason})` : "",
       v.superseded_by ? ` (superseded by ${v.superseded_by.slice(0, 8)})` : ""].join(""))))));
  parts.push(el("h3", {}, "Changes and provenance"), el("table", { id: "changes-table" },
    el("thead", {}, el("tr", {}, ["when recorded", "change", "from", "by", "why"]
      .map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, fact.changes.map((c) => row(when(c.recorded_at), c.change,
      c.session_id || c.message_ids?.length || c.event_id ? [
        c.session_id ? el("button", { type: "button", class: "link", "data-session": c.session_id,
                                      onclick: () => guarded(() => openSession(c.session_id)) },
                          `session ${c.session_id}`) : "",
        c.message_ids?.length ? ` messages ${c.message_ids.join(", ")}` : "",
        c.event_id ? ` (event ${c.event_id})` : ""] : "—",
      c.actor || "—", c.reason || c.cause || "")))));
  parts.push(curationSection(fact, { known: state.known, labelOf, report: guarded, done: curated }));
  if (state.curated?.fact_id === factId) {
    const c = state.curated;
    parts.unshift(el("p", { id: "curate-status", class: "curated", role: "status" }, `Done: ${c.action}, `
      + `${c.events} event(s) written, log position ${c.position}`
      + (c.new_fact_id ? `; the new fact is ${c.new_fact_id.slice(0, 8)}` : "") + "."));
  }
  panel.replaceChildren(...parts);
  exposed.fact = { fact_id: factId, versions: fact.versions.length, changes: fact.changes.length,
                   in_view: Boolean(item) };
  $("fact-title").tabIndex = -1;
}

async function curated(result) {
  // A curation wrote events: say so, show the fact as it is now, and redraw the view from the live index.
  const positions = result.writes.map((w) => w.position).filter((p) => p !== null && p !== undefined);
  state.curated = { ...result, events: result.writes.reduce((sum, w) => sum + (w.events || 0), 0),
                    position: positions.length ? Math.max(...positions) : null };
  if (state.perspective && !believedAt()) await showPerspective();
  await openFact(result.fact_id);
  exposed.curated = state.curated;  // once the view and the fact show the change
}

function refocus(ref) {
  if (!state.perspective || ref === state.perspective.agent) return;
  state.focus = [ref];
  renderFocus();
  guarded(() => showPerspective());
}

// ------------------------------------------------------------------------------------------------ explain

async function explain(id) {
  if (id.startsWith("srch-")) {
    showSearch(await api.explainSearch(id));
    return;
  }
  if (id.startsWith("ctx-")) {
    const context = await api.explainContext(id);
    renderContext(context);
    if (context.perspective) await render(context.perspective, { live: false });
    return;
  }
  const explained = await api.explainPerspective(id);
  const perspective = { perspective_id: explained.perspective_id, ...explained.inputs, ...explained.outputs,
                        parameters: explained.parameters };
  setStandpoint(perspective);
  await render(perspective, { live: false });
}

function setStandpoint(perspective) {
  const select = $("agent");
  if (![...select.options].some((o) => o.value === perspective.agent)) {
    select.append(el("option", { value: perspective.agent }, perspective.agent));
  }
  select.value = perspective.agent;
  const serving = $("serving");
  serving.value = perspective.serving ? labelOf(perspective.serving) : "";
  serving.dataset.ref = perspective.serving || "";
  serving.dataset.picked = serving.value;
  state.focus = [...(perspective.focus || [])];
  renderFocus();
}

// ------------------------------------------------------------------------------------------------ context

function idButtons(ids) {
  return ids.map((id) => el("button", { type: "button", class: "link", onclick: () => guarded(() => openFact(id)) },
                             id.slice(0, 8)));
}

function renderContext(context) {
  selectTab("context");
  const blocks = context.blocks.map((block) => {
    const lines = block.lines
      ? block.lines.map((line) => el("li", {}, line.text, line.fact_ids?.length
        ? el("span", { class: "ids" }, " facts ", idButtons(line.fact_ids)) : null,
      line.message_ids?.length ? el("span", { class: "ids" }, ` messages ${line.message_ids.join(", ")}`) : null))
      : null;
    return el("section", { class: "context-block", dataset: { role: block.role } },
      el("h3", {}, `${block.role}: ${block.tokens} of ${block.budget_tokens} tokens`),
      lines ? el("ul", {}, lines) : el("pre", { class: "block" }, block.text),
      block.fact_ids?.length ? el("p", { class: "ids" }, "facts ", idButtons(block.fact_ids)) : null,
      block.message_ids?.length ? el("p", { class: "ids" }, `messages ${block.message_ids.join(", ")}`) : null,
      block.session_ids?.length ? el("p", { class: "ids" }, `sessions ${block.session_ids.join(", ")}`) : null);
  });
  const omitted = context.omitted || [];
  const perspectiveId = context.perspective_id || context.perspective?.perspective_id;
  $("panel-context").replaceChildren(
    el("h2", {}, `Context ${context.context_id}`),
    el("p", { class: "ids" }, `session ${context.session_id} · ${context.agent}`
      + (context.serving ? ` serving ${context.serving}` : "") + ` · ${context.tokens} of ${context.budget_tokens}`
      + " tokens"),
    perspectiveId ? el("p", {}, el("button", { type: "button", onclick: () => guarded(() => explain(perspectiveId)) },
                                   "Draw its perspective")) : null,
    ...blocks,
    el("h3", {}, `Cut (${omitted.length})`),
    omitted.length ? el("ul", { id: "omitted" }, omitted.map((o) => el("li", {}, `${o.role} ${o.kind}, cut at`
      + ` ${o.stage}: ${o.text}`, o.ids?.length ? el("span", { class: "ids" }, ` (${o.ids.join(", ")})`) : null)))
      : el("p", { class: "help" }, "Nothing was cut."));
  exposed.context = { context_id: context.context_id, roles: context.blocks.map((b) => b.role),
                      omitted: omitted.length, perspective_id: perspectiveId || null };
}

// ------------------------------------------------------------------------------------------------ sessions

// A session as the API knows it (GET /v1/sessions/{id}/workers): who, serving whom, how far along, its turns and
// compactions counted, its last summary, and the worker sessions it dispatched (each opens in turn). Message
// texts are not shown: no route returns them.
async function openSession(sessionId) {
  selectTab("session");
  const panel = $("panel-session");
  panel.replaceChildren(el("p", { class: "help" }, "Loading the session…"));
  const answer = await api.session(sessionId);
  const s = answer.session;
  const open = (id) => el("button", { type: "button", class: "link", "data-session": id,
                                      onclick: () => guarded(() => openSession(id)) }, id);
  const facts = (refs) => (refs || []).map((ref) => el("button", { type: "button", class: "link",
                                                                  onclick: () => refocus(ref) }, labelOf(ref)));
  const card = [["agent", labelOf(s.agent)], ["serving", s.serving ? labelOf(s.serving) : "—"], ["kind", s.kind],
    ["status", [s.status || "—", s.ended ? " (ended)" : ""]], ["started", when(s.started_at)],
    ["last change", when(s.updated_at)], ["turns (messages)", String(s.messages ?? 0)],
    ["compactions", String(s.compactions ?? 0)]];
  if (s.parent_session_id) card.push(["dispatched by", open(s.parent_session_id)]);
  if (s.task) card.push(["task", s.task]);
  if (s.about?.length) card.push(["about", facts(s.about)]);
  panel.replaceChildren(
    el("h2", { id: "session-title" }, `Session ${s.session_id}`),
    el("dl", { class: "breakdown", id: "session-card" }, card.flatMap(([name, value]) => [el("dt", {}, name),
                                                                                          el("dd", {}, value)])),
    el("h3", {}, "Last summary"),
    s.last_summary ? el("pre", { class: "block", id: "session-summary" }, s.last_summary)
      : el("p", { class: "help" }, "No summary yet (one is written when its context is compacted)."),
    el("h3", {}, `Worker sessions (${answer.count})`),
    answer.count ? el("table", { id: "workers" },
      el("thead", {}, el("tr", {}, ["session", "task", "about", "status", "summary"]
        .map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, answer.data.map((w) => row(open(w.session_id), w.task || "—", facts(w.about),
                                                   `${w.status || "—"}${w.ended ? " (ended)" : ""}`,
                                                   w.last_summary || "")))) : el("p", { class: "help" }, "None."),
    el("p", {}, el("button", { type: "button", onclick: () => guarded(async () => {
      renderContext(await api.context(s.session_id, ""));
    }) }, "Assemble its context ", el("span", { class: "optional" }, "(records a recall)"))));
  exposed.session = { session_id: s.session_id, agent: s.agent, serving: s.serving, workers: answer.count };
  $("session-title").tabIndex = -1;
}

// ------------------------------------------------------------------------------------------------ search

async function search(query) {
  const { agent, serving } = await standpoint();
  // Observing searches the live index with `record: false`, which records nothing; serving records `looked_up`;
  // only a moment of the slider asks with `as_of`.
  const asOf = believedAt() || undefined;
  const started = performance.now();
  const answer = await api.search({ agent, query, serving: serving || undefined, k: 20, as_of: asOf,
                                    record: asOf || $("record").checked ? undefined : false });
  showSearch(answer);
  await new Promise((resolve) => requestAnimationFrame(() => resolve()));
  exposed.timings.push({ kind: "search", total: performance.now() - started });
}

function showSearch(answer) {
  const query = answer.query;
  // A result is a fact (an edge of the graph) or a turn (a message of a session: no edge to light up).
  const facts = answer.items.filter((hit) => hit.fact_id);
  state.hits = new Map(facts.map((hit) => [hit.fact_id, hit]));
  exposed.hits = Object.fromEntries(facts.map((hit) => [hit.fact_id, hit.score]));
  exposed.searchId = answer.search_id;
  const box = $("search-results");
  box.hidden = false;
  box.replaceChildren(el("strong", {}, `${answer.items.length} results for “${query}”`
    + (answer.answered_by ? ` (answered by ${answer.answered_by})` : "")), el("ol", {},
    answer.items.map((hit) => el("li", hit.fact_id ? { dataset: { factId: hit.fact_id } } : {},
      hit.fact_id
        ? el("button", { type: "button", class: "link", onclick: () => guarded(() => openFact(hit.fact_id)) },
             hit.text || `${hit.subject} ${hit.relation} ${hit.object}`)
        : el("span", { class: "turn" }, `[${hit.session_id} · ${hit.message_id}] ${hit.text}`),
      ` score ${hit.score.toFixed(3)}`,
      !hit.fact_id || state.items.has(hit.fact_id) ? "" : " (not in this view)",
      el("span", { class: "why" }, Object.entries(hit.scores || {})
        .map(([name, value]) => `${name} ${value.toFixed(3)}`).join(" · "))))),
    el("p", { class: "ids" }, `search ${answer.search_id}`));
  for (const node of document.querySelectorAll(".item.hit")) node.classList.remove("hit");
  state.cy?.edges().removeClass("hit");
  for (const hit of facts) {
    const edge = state.cy?.$id(hit.fact_id);
    if (edge && edge.length) edge.data("hitLabel", `${hit.relation} · ${hit.score.toFixed(2)}`).addClass("hit");
    $("items").querySelector(`[data-fact-id="${hit.fact_id}"]`)?.classList.add("hit");
  }
  selectTab("items");
}

// ------------------------------------------------------------------------------------------------ wiring

function play() {
  if (state.playing) {
    clearTimeout(state.playing);
    state.playing = null;
    $("play").textContent = "Play";
    return;
  }
  const slider = $("believed");
  if (Number(slider.value) >= state.moments.length) slider.value = "0";
  $("play").textContent = "Pause";
  const step = async () => {
    describeSlider();
    await guarded(() => showPerspective());
    if (Number(slider.value) >= state.moments.length || !state.playing) {
      state.playing = null;
      $("play").textContent = "Play";
      return;
    }
    slider.value = String(Number(slider.value) + 1);
    state.playing = setTimeout(step, 900);
  };
  state.playing = setTimeout(step, 0);
}

function wire() {
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("api-key").value.trim();
    if (!value) {
      showProblem(new ApiError(0, "No key", "enter an API key (nk_...) first"));
      return;
    }
    guarded(() => useKey(value));
  });
  $("forget-key").addEventListener("click", () => {
    key.clear();
    location.reload();
  });
  $("standpoint").addEventListener("submit", (event) => {
    event.preventDefault();
    guarded(async () => {
      await showPerspective();
      // one column (a narrow screen): bring the drawing into view under the form
      if (matchMedia("(max-width: 900px)").matches) $("summary").scrollIntoView({ block: "start" });
    });
  });
  $("deeper").addEventListener("click", () => guarded(async () => {
    const perspective = await api.deepen(state.perspective.perspective_id, Number($("budget").value) || undefined);
    await render(perspective, { live: true });
  }));
  $("graph").addEventListener("keydown", graphKey);
  $("graph").addEventListener("focus", () => { if (!state.cursor && state.perspective) moveCursor(state.perspective.agent); });
  const boxes = [nameBox($("serving"), state.known, () => {}),
                 nameBox($("focus-input"), state.known, (entity) => addFocus(entity.ref), { keep: false })];
  $("standpoint").addEventListener("submit", () => boxes.forEach((box) => box.close()));
  $("focus-input").addEventListener("keydown", (event) => {
    // Enter on a suggestion picked it (the name box); Enter on typed text adds what it names
    if (event.key !== "Enter" || event.defaultPrevented) return;
    event.preventDefault();
    boxes[1].close();  // a lookup the typing started would open suggestions under the emptied box
    const text = event.target.value.trim();
    if (/^[a-z][a-z0-9_-]*:\S+$/.test(text)) {  // a ref: at once
      addFocus(text);
      event.target.value = "";
      return;
    }
    guarded(addTypedFocus);
  });
  const slider = $("believed");
  slider.addEventListener("input", describeSlider);
  slider.addEventListener("change", () => { if (state.perspective) guarded(() => showPerspective()); });
  $("play").addEventListener("click", play);
  $("now").addEventListener("click", () => {
    slider.value = slider.max;
    describeSlider();
    if (state.perspective) guarded(() => showPerspective());
  });
  $("true-at").addEventListener("change", () => guarded(applyValidTime));
  $("clear-true-at").addEventListener("click", () => {
    $("true-at").value = "";
    guarded(applyValidTime);
  });
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const query = $("search").value.trim();
    if (query) guarded(() => search(query));
  });
  $("explain-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = $("explain-id").value.trim();
    if (id) guarded(() => explain(id));
  });
  $("open-session").addEventListener("click", () => {
    const session = $("session-id").value.trim();
    if (!session) {
      showProblem(new ApiError(0, "No session", "enter a session's id"));
      return;
    }
    guarded(() => openSession(session));
  });
  $("context-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const session = $("session-id").value.trim();
    if (!session) {
      showProblem(new ApiError(0, "No session", "enter a main session's id"));
      return;
    }
    guarded(async () => renderContext(await api.context(session, $("context-message").value.trim())));
  });
  const tabs = ["items", "details", "context", "session"];
  for (const name of tabs) {
    const tab = $(`tab-${name}`);
    tab.addEventListener("click", () => selectTab(name));
    tab.addEventListener("keydown", (event) => {
      const move = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (!move) return;
      const next = tabs[(tabs.indexOf(name) + move + tabs.length) % tabs.length];
      selectTab(next);
      $(`tab-${next}`).focus();
    });
  }
  $("items").addEventListener("keydown", (event) => {
    // Up and down move between the items, like a list.
    const move = { ArrowDown: 1, ArrowUp: -1 }[event.key];
    if (!move) return;
    const buttons = [...$("items").querySelectorAll("button.item")];
    const at = buttons.indexOf(document.activeElement);
    if (at < 0) return;
    event.preventDefault();
    buttons[Math.max(0, Math.min(buttons.length - 1, at + move))].focus();
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && state.selected && state.returnTo === "graph") {
      state.returnTo = null;
      $("graph").focus();
    } else if (event.key === "Escape" && state.selected) {
      selectTab("items");
      $("items").querySelector(`[data-fact-id="${state.selected}"]`)?.focus();
    }
  });
}

async function start() {
  wire();
  try {
    state.cytoscape = (await import("./vendor/cytoscape.esm.min.js")).default;
  } catch (error) {
    $("graph").replaceChildren(el("p", { class: "problem", role: "alert" }, "The graph library is missing:"
      + " api/explorer/static/vendor/cytoscape.esm.min.js was not built into this install (`make install` vendors"
      + ` it from ui/package-lock.json). The list of items still works. (${error.message})`));
  }
  const stored = key.get();
  if (stored) {
    $("key-status").textContent = "Checking the stored key…";
    await guarded(() => useKey(stored));
  }
  exposed.ready = true;
  document.body.dataset.ready = "true";
}

start().catch((error) => showProblem(error));
