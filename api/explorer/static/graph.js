// A perspective as a graph: the model (plain data, what the tests read), its layout (a radial tree: the
// standpoint in the centre, one ring per hop, each node in the angular sector of the node that brought it in, so
// an edge runs inside its own sector instead of across unrelated nodes), and its drawing with cytoscape.js,
// with labels by level of detail placed where they collide with nothing.

const TIER_RANK = { full: 0, gist: 1, marker: 2 };
export const DRAW_CAP = 150;
// Entities drawn at most: past it the weakest markers are drawn as one node per neighbour ("12 more via X"),
// which a tap expands. The summary says how many are held back.
export const COUNT_NODES = 24;
// "N more about X" nodes drawn at most (the largest groups); the other groups are one node, "N more in K other
// groups", and all of them are in the list.

const LABEL_PX = 11;        // the rendered size of an always-labelled name, whatever the zoom
const LABEL_ZOOMED_PX = 9;  // other names appear once the zoom renders them at least this large
const RING_STEP = 90;       // model units between rings
const NODE_SPACING = 34;    // model units between neighbours on a ring

function shorten(text, most) {
  if (!text) return "";
  return text.length > most ? `${text.slice(0, most - 1)}…` : text;
}

// The nodes and edges of a perspective. `known` maps a ref to what is known of its entity ({label, hub});
// `expanded` holds the facts a tap on their group asked to draw past the cap.
export function perspectiveModel(perspective, known, expanded = new Set(), cap = DRAW_CAP) {
  const nodes = new Map();
  const sources = [perspective.agent, perspective.serving, ...(perspective.focus || [])].filter(Boolean);
  const node = (ref, ring, label) => {
    let n = nodes.get(ref);
    if (!n) {
      const entity = known.get(ref);
      n = { id: ref, label: entity?.label || label || ref, ring, role: "entity", hub: Boolean(entity?.hub),
            more: 0, strongest: "marker", kind: "entity" };
      nodes.set(ref, n);
    }
    if (ring < n.ring) n.ring = ring;
    if (label && n.label === ref) n.label = label;
    return n;
  };
  sources.forEach((ref) => { node(ref, 0).role = "standpoint"; });
  if (perspective.serving) nodes.get(perspective.serving).role = "serving";
  for (const ref of perspective.focus || []) nodes.get(ref).role = "focus";
  nodes.get(perspective.agent).role = "agent";

  const edges = [];
  for (const item of perspective.items || []) {
    (item.path || []).forEach((ref, hop) => node(ref, hop));
    const subject = node(item.subject, item.hops, item.subject_label);
    const object = node(item.object, item.hops, item.object_label);
    for (const end of [subject, object]) {
      if (TIER_RANK[item.tier] < TIER_RANK[end.strongest]) end.strongest = item.tier;
    }
    const label = item.tier === "full" ? `${item.relation}: ${shorten(item.reason || "(no reason recorded)", 36)}`
      : item.tier === "gist" ? item.relation : "";
    const path = item.path || [];
    edges.push({ id: item.fact_id, source: item.subject, target: item.object, tier: item.tier,
                 relation: item.relation, label, scope: item.scope, activation: item.activation, hops: item.hops,
                 anchor: path.length >= 2 ? path[path.length - 2] : perspective.agent, drawn: true });
  }
  for (const group of perspective.count_groups || []) {
    const n = node(group.about, nodes.get(group.about)?.ring ?? 1, group.label);
    n.more += group.count;
  }
  for (const n of nodes.values()) {
    if (n.role !== "entity") n.strongest = "full";
    n.display = n.label;
    // Level of detail: the standpoint and the ends of full and gist facts are always named; the rest on zoom
    // or hover.
    n.lod = n.role !== "entity" || n.strongest !== "marker" ? "always" : "zoom";
    n.drawn = true;
  }

  // The cap: the standpoint, every full and gist fact with its path, then markers by activation.
  const drawn = new Set();
  const draw = (ref) => drawn.add(ref);
  sources.forEach(draw);
  const byStrength = [...(perspective.items || [])].sort((a, b) => TIER_RANK[a.tier] - TIER_RANK[b.tier]
    || b.activation - a.activation);
  const held = new Map();  // anchor -> the edges held back there
  const edgeOf = new Map(edges.map((e) => [e.id, e]));
  for (const item of byStrength) {
    const edge = edgeOf.get(item.fact_id);
    const ends = [...new Set([...(item.path || []), item.subject, item.object])];
    const fresh = ends.filter((ref) => !drawn.has(ref));
    // held back at the nearest node of its path already drawn
    edge.anchor = [...(item.path || []).slice(0, -1)].reverse().find((ref) => drawn.has(ref)) || perspective.agent;
    if (item.tier !== "marker" || expanded.has(edge.id) || drawn.size + fresh.length <= cap) {
      ends.forEach(draw);
      continue;
    }
    edge.drawn = false;
    if (!held.has(edge.anchor)) held.set(edge.anchor, []);
    held.get(edge.anchor).push(edge);
  }
  for (const n of nodes.values()) n.drawn = drawn.has(n.id);
  // An edge held back whose two ends are drawn anyway (for a stronger fact) is drawn after all.
  for (const [anchor, list] of held) {
    const still = list.filter((e) => !(drawn.has(e.source) && drawn.has(e.target)));
    for (const e of list) if (!still.includes(e)) e.drawn = true;
    if (still.length) held.set(anchor, still);
    else held.delete(anchor);
  }

  // Clusters: one node per neighbour for the facts counted beyond the caps ("42 more about contract v3", a tap
  // focuses on it) and for the markers held back by the cap ("12 more via X", a tap draws them).
  const clusters = [];
  const groups = [...(perspective.count_groups || [])].sort((a, b) => b.count - a.count);
  const rest = { groups: 0, count: 0 };
  for (const group of groups) {
    const about = nodes.get(group.about);
    if (!about?.drawn || clusters.length >= COUNT_NODES) {
      rest.groups += 1;
      rest.count += group.count;
      continue;
    }
    clusters.push({ id: `count:${group.about}`, kind: "count", about: group.about, count: group.count,
                    ring: about.ring + 1, label: `${group.count} more about ${about.label}`, lod: "cluster" });
  }
  if (rest.groups) {
    clusters.push({ id: "count:*", kind: "rest", about: perspective.agent, count: rest.count, ring: 1,
                    lod: "cluster", label: `${rest.count} more in ${rest.groups} other groups (listed)` });
  }
  for (const [anchor, list] of held) {
    const at = nodes.get(anchor);
    if (!at?.drawn) continue;
    clusters.push({ id: `held:${anchor}`, kind: "held", about: anchor, count: list.length, ring: at.ring + 1,
                    facts: list.map((e) => e.id), lod: "cluster",
                    label: `${list.length} more via ${at.label} (held back: tap to draw)` });
  }
  const heldBack = [...held.values()].reduce((sum, list) => sum + list.length, 0);
  return { nodes: [...nodes.values()], edges, clusters,
           cap: { cap, drawnNodes: drawn.size, nodes: nodes.size, heldEdges: heldBack, groups: held.size,
                  countNodes: clusters.filter((c) => c.kind === "count").length, countGroups: groups.length } };
}

// ------------------------------------------------------------------------------------------------ layout

// A radial tree: every drawn node hangs from one parent a ring nearer the standpoint (through its strongest
// fact); each subtree gets an angular sector as wide as its leaves, so its edges stay inside it. Rings grow
// until the narrowest sector on them leaves NODE_SPACING between neighbours.
export function radialLayout(model) {
  const drawnNodes = model.nodes.filter((n) => n.drawn);
  const all = [...drawnNodes, ...model.clusters];
  const byId = new Map(all.map((n) => [n.id, n]));
  const roots = drawnNodes.filter((n) => n.ring === 0);
  const parent = new Map();
  const strength = new Map();
  for (const e of model.edges) {
    if (!e.drawn) continue;
    for (const [child, other] of [[e.source, e.target], [e.target, e.source]]) {
      const c = byId.get(child);
      const o = byId.get(other);
      if (!c || !o || c.ring === 0 || o.ring !== c.ring - 1) continue;
      const score = (3 - TIER_RANK[e.tier]) * 1000 + e.activation;
      if (!parent.has(child) || score > strength.get(child)) {
        parent.set(child, other);
        strength.set(child, score);
      }
    }
  }
  for (const c of model.clusters) parent.set(c.id, c.about);
  const children = new Map(all.map((n) => [n.id, []]));
  const orphans = [];
  for (const n of all) {
    if (n.ring === 0) continue;
    const p = parent.get(n.id);
    if (p && children.has(p)) children.get(p).push(n.id);
    else orphans.push(n.id);
  }
  // A node with no parent a ring nearer (an end whose path went elsewhere) hangs from the nearest ring below.
  for (const id of orphans) {
    const n = byId.get(id);
    const candidates = drawnNodes.filter((m) => m.ring < n.ring && m.id !== id);
    const p = candidates.sort((a, b) => b.ring - a.ring)[0] || roots[0];
    children.get(p.id).push(id);
    n.layoutRing = p.ring + 1;
  }
  const ringOf = (n) => n.layoutRing ?? n.ring;
  // order siblings so that strong ones sit in the middle of their parent's sector and clusters at its edge
  const weight = new Map();
  const leaves = (id) => {
    const kids = children.get(id);
    const w = kids.length ? kids.reduce((sum, k) => sum + leaves(k), 0) : 1;
    weight.set(id, w);
    return w;
  };
  const total = roots.reduce((sum, r) => sum + leaves(r.id), 0) || 1;
  const angle = new Map();
  const place = (id, from, to) => {
    angle.set(id, (from + to) / 2);
    const kids = children.get(id);
    const w = weight.get(id);
    let at = from;
    for (const k of kids) {
      const share = (to - from) * weight.get(k) / w;
      place(k, at, at + share);
      at += share;
    }
  };
  let at = -Math.PI / 2;
  for (const r of roots) {
    const share = 2 * Math.PI * weight.get(r.id) / total;
    place(r.id, at, at + share);
    at += share;
  }
  // Radii: ring 0 on a small circle (its centre for a single source), each further ring far enough out that the
  // narrowest angular share on it still leaves NODE_SPACING.
  const maxRing = Math.max(0, ...all.map(ringOf));
  const narrowest = new Array(maxRing + 1).fill(2 * Math.PI);
  for (const n of all) {
    const share = 2 * Math.PI * weight.get(n.id) / total;
    narrowest[ringOf(n)] = Math.min(narrowest[ringOf(n)], share);
  }
  const radius = [roots.length > 1 ? Math.max(RING_STEP * 0.6, NODE_SPACING / narrowest[0]) : 0];
  for (let ring = 1; ring <= maxRing; ring++) {
    radius[ring] = Math.max(radius[ring - 1] + RING_STEP, NODE_SPACING / narrowest[ring]);
  }
  const positions = {};
  for (const n of all) {
    const r = radius[ringOf(n)];
    const a = angle.get(n.id) ?? 0;
    positions[n.id] = { x: r * Math.cos(a), y: r * Math.sin(a) };
  }
  return positions;
}

// ------------------------------------------------------------------------------------------------ drawing

const STYLE = [
  { selector: "node", style: {
    "label": "data(display)", "text-wrap": "wrap", "text-max-width": 150, "font-size": LABEL_PX,
    "text-valign": "bottom", "text-halign": "center", "text-margin-y": 2, "width": 14, "height": 14,
    "background-color": "#5b6473", "color": "#1d2330", "text-background-color": "#ffffff",
    "text-background-opacity": 0.85, "text-background-padding": 1,
    "min-zoomed-font-size": LABEL_ZOOMED_PX } },
  { selector: "node[strongest = 'marker']", style: { "opacity": 0.55 } },
  { selector: "node[role = 'agent']", style: { "background-color": "#2459c9", "width": 30, "height": 30,
    "font-weight": "bold" } },
  { selector: "node[role = 'serving']", style: { "background-color": "#2f855a", "width": 24, "height": 24,
    "font-weight": "bold" } },
  { selector: "node[role = 'focus']", style: { "background-color": "#805ad5", "width": 24, "height": 24,
    "font-weight": "bold" } },
  { selector: "node[strongest = 'full'][role = 'entity']", style: { "width": 20, "height": 20,
    "background-color": "#1d2330" } },
  { selector: "node[?hub]", style: { "shape": "octagon", "background-color": "#c53030", "width": 22,
    "height": 22 } },
  { selector: "node[more > 0]", style: { "border-width": 3, "border-style": "dashed", "border-color": "#b7791f" } },
  { selector: "node[kind = 'count'], node[kind = 'held']", style: { "shape": "round-rectangle", "width": 18,
    "height": 12, "background-color": "#fefcbf", "border-width": 2, "border-style": "dashed",
    "border-color": "#b7791f", "color": "#744210", "opacity": 1 } },
  { selector: "node[kind = 'rest']", style: { "width": 26, "height": 16 } },
  { selector: "node[kind = 'held']", style: { "background-color": "#edf2f7", "border-color": "#718096",
    "color": "#4a5568" } },
  // always-labelled: the label is shown at any zoom (its size follows the zoom, set as a bypass)
  { selector: "node.label-on", style: { "min-zoomed-font-size": 0 } },
  { selector: "node.label-off", style: { "label": "" } },
  { selector: "edge", style: { "curve-style": "bezier", "target-arrow-shape": "triangle", "arrow-scale": 0.7,
    "label": "data(relation)", "font-size": 10, "text-rotation": "autorotate", "color": "#4a5568",
    "text-background-color": "#ffffff", "text-background-opacity": 0.85, "text-background-padding": 1,
    "min-zoomed-font-size": LABEL_ZOOMED_PX } },
  { selector: "edge[tier = 'full']", style: { "width": 3, "line-color": "#1d2330",
    "target-arrow-color": "#1d2330", "color": "#1d2330" } },
  { selector: "edge[tier = 'gist']", style: { "width": 2, "line-color": "#718096", "target-arrow-color": "#718096" } },
  { selector: "edge[tier = 'marker']", style: { "width": 1, "line-color": "#cbd2dc", "target-arrow-color": "#cbd2dc",
    "opacity": 0.6 } },
  { selector: "edge[kind = 'cluster']", style: { "line-style": "dashed", "line-color": "#d6bc7a",
    "target-arrow-shape": "none", "width": 1, "label": "" } },
  { selector: "edge.appeared", style: { "line-color": "#2f855a", "target-arrow-color": "#2f855a" } },
  { selector: "edge.corroborated", style: { "line-color": "#2459c9", "target-arrow-color": "#2459c9" } },
  { selector: "edge.not-valid", style: { "line-style": "dashed", "opacity": 0.35 } },
  { selector: "edge.hit", style: { "line-color": "#d69e2e", "target-arrow-color": "#d69e2e", "width": 5,
    "label": "data(hitLabel)", "min-zoomed-font-size": 0 } },
  { selector: "node.hit", style: { "border-width": 3, "border-color": "#d69e2e" } },
  { selector: "edge.hover, edge:selected", style: { "label": "data(label)", "min-zoomed-font-size": 0,
    "z-index": 10 } },
  { selector: ":selected", style: { "overlay-color": "#2459c9", "overlay-opacity": 0.25, "overlay-padding": 5 } },
  { selector: "node.cursor", style: { "overlay-color": "#d69e2e", "overlay-opacity": 0.35, "overlay-padding": 7,
    "min-zoomed-font-size": 0 } },
];

const PRIORITY = { agent: 0, serving: 1, focus: 2 };
function labelPriority(n) {
  if (n.data("kind") !== "entity") return 6;
  const role = n.data("role");
  if (role in PRIORITY) return PRIORITY[role];
  return { full: 3, gist: 4 }[n.data("strongest")] ?? 7;
}

let measurer = null;
function textWidth(text, bold) {
  measurer ??= document.createElement("canvas").getContext("2d");
  measurer.font = `${bold ? "bold " : ""}${LABEL_PX}px system-ui, "Noto Sans", "Noto Sans CJK SC", sans-serif`;
  return Math.max(...String(text).split("\n").map((line) => measurer.measureText(line).width));
}

const PLACES = [["bottom", "center"], ["top", "center"], ["center", "right"], ["center", "left"],
                ["bottom", "right"], ["bottom", "left"], ["top", "right"], ["top", "left"]];

function overlap(a, b) {
  const w = Math.min(a.x2, b.x2) - Math.max(a.x1, b.x1);
  const h = Math.min(a.y2, b.y2) - Math.max(a.y1, b.y1);
  return w > 0 && h > 0 ? w * h : 0;
}

// Level-of-detail labels, placed where they collide with nothing: in rendered (screen) space, at a fixed
// rendered size; the always-labelled nodes first (standpoint, full, gist), each taking the first of eight places
// around its node that overlaps no label placed before it nor any node; an always-labelled node whose places all
// collide keeps the least crowded one; any other label that would collide is hidden until zoomed or hovered.
export function placeLabels(cy) {
  const zoom = cy.zoom();
  const nodes = cy.nodes().sort((a, b) => labelPriority(a) - labelPriority(b));
  const obstacles = nodes.map((n) => {
    const p = n.renderedPosition();
    const r = n.renderedOuterWidth() / 2;
    return { x1: p.x - r, y1: p.y - r, x2: p.x + r, y2: p.y + r, id: n.id() };
  });
  const placed = [];
  const fontPx = LABEL_PX;
  cy.batch(() => {
    for (const n of nodes) {
      const always = n.data("lod") === "always" || n.hasClass("cursor") || n.hasClass("hover");
      const cluster = n.data("lod") === "cluster";
      const zoomedIn = LABEL_PX * zoom >= LABEL_ZOOMED_PX;
      if (!always && !cluster && !zoomedIn) {
        n.removeClass("label-on").addClass("label-off");
        continue;
      }
      const text = n.data("display") || "";
      const lines = Math.max(1, Math.ceil(textWidth(text, false) / 150));
      const width = Math.min(150, textWidth(text, n.data("role") !== "entity")) + 2;
      const height = lines * fontPx * 1.25 + 2;
      const p = n.renderedPosition();
      const r = n.renderedOuterWidth() / 2 + 2;
      let best = null;
      for (const [valign, halign] of PLACES) {
        const x1 = halign === "center" ? p.x - width / 2 : halign === "right" ? p.x + r : p.x - r - width;
        const y1 = valign === "center" ? p.y - height / 2 : valign === "bottom" ? p.y + r : p.y - r - height;
        const box = { x1, y1, x2: x1 + width, y2: y1 + height };
        let crowd = 0;
        for (const other of placed) crowd += overlap(box, other);
        for (const o of obstacles) if (o.id !== n.id()) crowd += overlap(box, o);
        if (!best || crowd < best.crowd) best = { crowd, valign, halign, box };
        if (crowd === 0) break;
      }
      if (best.crowd > 0 && !always) {
        n.removeClass("label-on").addClass("label-off");
        continue;
      }
      placed.push(best.box);
      n.removeClass("label-off").addClass("label-on");
      n.style({ "text-valign": best.valign, "text-halign": best.halign, "font-size": fontPx / zoom,
                "text-margin-y": (best.valign === "bottom" ? 2 : best.valign === "top" ? -2 : 0) / zoom,
                "text-margin-x": (best.halign === "right" ? 3 : best.halign === "left" ? -3 : 0) / zoom,
                "text-max-width": 150 / zoom });
    }
  });
}

// What cytoscape renders of each node's label: shown (its text is not empty, its rendered size reaches the
// zoom threshold, the node is visible) and its rendered box. The tests read this, not pixels.
export function renderedLabels(cy) {
  const zoom = cy.zoom();
  return cy.nodes().map((n) => {
    const text = n.pstyle("label").strValue || "";
    const size = n.pstyle("font-size").pfValue * zoom;
    const shown = n.visible() && text !== "" && n.pstyle("text-opacity").value > 0
      && size >= n.pstyle("min-zoomed-font-size").pfValue;
    const box = n.renderedBoundingBox({ includeNodes: false, includeEdges: false, includeLabels: true,
                                        includeOverlays: false });
    return { id: n.id(), text, shown, size, box: { x1: box.x1, y1: box.y1, x2: box.x2, y2: box.y2 } };
  });
}

// The drawn edges that pass over a node other than their own ends (closer than the node's radius plus a margin,
// on screen): what the layout is meant to avoid. Straight segments; cytoscape's bezier pairs bow a little.
export function edgesThroughNodes(cy, margin = 2) {
  const crossings = [];
  const nodes = cy.nodes().map((n) => ({ id: n.id(), p: n.renderedPosition(), r: n.renderedOuterWidth() / 2 }));
  for (const e of cy.edges()) {
    const a = e.source().renderedPosition();
    const b = e.target().renderedPosition();
    const dx = b.x - a.x;
    const dy = b.y - a.y;
    const length2 = dx * dx + dy * dy || 1;
    for (const n of nodes) {
      if (n.id === e.source().id() || n.id === e.target().id()) continue;
      const t = ((n.p.x - a.x) * dx + (n.p.y - a.y) * dy) / length2;
      if (t <= 0 || t >= 1) continue;
      const distance = Math.hypot(a.x + t * dx - n.p.x, a.y + t * dy - n.p.y);
      if (distance < n.r + margin) crossings.push({ edge: e.id(), node: n.id });
    }
  }
  return crossings;
}

// Draw `model` in `container`; resolves once laid out and labelled. `onFact(id)` / `onEntity(ref)` /
// `onCluster(cluster)` on a tap.
export function drawGraph(cytoscape, container, previous, model, { onFact, onEntity, onCluster }) {
  if (previous) previous.destroy();
  const positions = radialLayout(model);
  const clusterLinks = model.clusters.map((c) => ({ id: `~${c.id}`, source: c.about, target: c.id,
                                                    kind: "cluster" }));
  const cy = cytoscape({
    container,
    elements: [...model.nodes.filter((n) => n.drawn).map((data) => ({ group: "nodes", data,
                                                                      position: positions[data.id] })),
               ...model.clusters.map((data) => ({ group: "nodes", data: { ...data, display: data.label },
                                                  position: positions[data.id] })),
               ...model.edges.filter((e) => e.drawn).map((data) => ({ group: "edges", data })),
               ...clusterLinks.map((data) => ({ group: "edges", data }))],
    style: STYLE,
    layout: { name: "preset", fit: true, padding: 40 },
    minZoom: 0.05, maxZoom: 4, boxSelectionEnabled: false, selectionType: "single",
    // the drawing is redrawn whole at each view: no animation to wait for, no textures to keep
    textureOnViewport: false, hideEdgesOnViewport: model.edges.length > 400,
  });
  cy.on("tap", "edge", (event) => { if (event.target.data("kind") !== "cluster") onFact(event.target.id()); });
  cy.on("tap", "node", (event) => {
    const n = event.target;
    if (n.data("kind") === "entity") onEntity(n.id());
    else onCluster(n.data());
  });
  cy.on("mouseover", "node", (event) => { event.target.addClass("hover"); placeLabels(cy); });
  cy.on("mouseout", "node", (event) => { event.target.removeClass("hover"); placeLabels(cy); });
  cy.on("mouseover", "edge", (event) => event.target.addClass("hover"));
  cy.on("mouseout", "edge", (event) => event.target.removeClass("hover"));
  let pending = null;
  cy.on("viewport", () => {
    // labels are placed again once a zoom or pan settles, not on every frame of it
    clearTimeout(pending);
    pending = setTimeout(() => placeLabels(cy), 80);
  });
  cy.on("destroy", () => clearTimeout(pending));
  if (!cy.container().clientWidth || !cy.container().clientHeight) cy.resize();
  // fit the nodes, place the labels at that zoom, then fit again with the labels in (they reach past the nodes)
  cy.fit(undefined, 30);
  placeLabels(cy);
  cy.fit(undefined, 12);
  placeLabels(cy);
  return cy;
}
