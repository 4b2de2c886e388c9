// A perspective as a graph: the model (plain data, what the tests read) and its drawing with cytoscape.js.
// Layout is cytoscape's own concentric layout: the standpoint in the centre, one ring per hop.

const TIER_RANK = { full: 0, gist: 1, marker: 2 };

function shorten(text, most) {
  if (!text) return "";
  return text.length > most ? `${text.slice(0, most - 1)}…` : text;
}

// The nodes and edges of a perspective. `known` maps a ref to what is known of its entity ({label, hub}).
export function perspectiveModel(perspective, known) {
  const nodes = new Map();
  const sources = [perspective.agent, perspective.serving, ...(perspective.focus || [])].filter(Boolean);
  const node = (ref, ring, label) => {
    let n = nodes.get(ref);
    if (!n) {
      const entity = known.get(ref);
      n = { id: ref, label: entity?.label || label || ref, ring, role: "entity", hub: Boolean(entity?.hub),
            more: 0, strongest: "marker" };
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
    edges.push({ id: item.fact_id, source: item.subject, target: item.object, tier: item.tier,
                 relation: item.relation, label, scope: item.scope, activation: item.activation, hops: item.hops });
  }
  for (const group of perspective.count_groups || []) {
    const n = node(group.about, nodes.get(group.about)?.ring ?? 1, group.label);
    n.more += group.count;
  }
  for (const n of nodes.values()) {
    if (n.role !== "entity") n.strongest = "full";
    n.display = n.more ? `${n.label}\n${n.more} more` : n.label;
  }
  return { nodes: [...nodes.values()], edges };
}

const STYLE = [
  { selector: "node", style: {
    "label": "data(display)", "text-wrap": "wrap", "text-max-width": 140, "font-size": 11,
    "text-valign": "bottom", "text-margin-y": 3, "width": 16, "height": 16, "background-color": "#5b6473",
    "color": "#1d2330", "text-background-color": "#ffffff", "text-background-opacity": 0.8,
    "text-background-padding": 1, "min-zoomed-font-size": 7 } },
  { selector: "node[strongest = 'marker']", style: { "opacity": 0.5 } },
  { selector: "node[role = 'agent']", style: { "background-color": "#2459c9", "width": 30, "height": 30,
    "font-weight": "bold", "font-size": 12 } },
  { selector: "node[role = 'serving']", style: { "background-color": "#2f855a", "width": 24, "height": 24,
    "font-weight": "bold" } },
  { selector: "node[role = 'focus']", style: { "background-color": "#805ad5", "width": 24, "height": 24,
    "font-weight": "bold" } },
  { selector: "node[?hub]", style: { "shape": "octagon", "background-color": "#c53030", "width": 22,
    "height": 22 } },
  { selector: "node[more > 0]", style: { "border-width": 3, "border-style": "dashed", "border-color": "#b7791f" } },
  { selector: "edge", style: { "curve-style": "bezier", "target-arrow-shape": "triangle", "arrow-scale": 0.7,
    "label": "data(label)", "font-size": 10, "text-rotation": "autorotate", "color": "#4a5568",
    "text-background-color": "#ffffff", "text-background-opacity": 0.85, "text-background-padding": 1,
    "min-zoomed-font-size": 7 } },
  { selector: "edge[tier = 'full']", style: { "width": 3, "line-color": "#1d2330",
    "target-arrow-color": "#1d2330", "color": "#1d2330" } },
  { selector: "edge[tier = 'gist']", style: { "width": 2, "line-color": "#718096", "target-arrow-color": "#718096" } },
  { selector: "edge[tier = 'marker']", style: { "width": 1, "line-color": "#cbd2dc", "target-arrow-color": "#cbd2dc",
    "opacity": 0.6 } },
  { selector: "edge.appeared", style: { "line-color": "#2f855a", "target-arrow-color": "#2f855a" } },
  { selector: "edge.corroborated", style: { "line-color": "#2459c9", "target-arrow-color": "#2459c9" } },
  { selector: "edge.not-valid", style: { "line-style": "dashed", "opacity": 0.35 } },
  { selector: "edge.hit", style: { "line-color": "#d69e2e", "target-arrow-color": "#d69e2e", "width": 5,
    "label": "data(hitLabel)" } },
  { selector: ":selected", style: { "overlay-color": "#2459c9", "overlay-opacity": 0.2, "overlay-padding": 4 } },
];

// Draw `model` in `container`; resolves once the layout has run. `onFact(id)` / `onEntity(ref)` on a tap.
export function drawGraph(cytoscape, container, previous, model, { onFact, onEntity }) {
  if (previous) previous.destroy();
  const maxRing = Math.max(0, ...model.nodes.map((n) => n.ring));
  const cy = cytoscape({
    container,
    elements: [...model.nodes.map((data) => ({ group: "nodes", data })),
               ...model.edges.map((data) => ({ group: "edges", data }))],
    style: STYLE,
    layout: { name: "preset" },
    minZoom: 0.2, maxZoom: 3, boxSelectionEnabled: false,
    selectionType: "single",
  });
  cy.on("tap", "edge", (event) => onFact(event.target.id()));
  cy.on("tap", "node", (event) => onEntity(event.target.id()));
  return new Promise((resolve) => {
    const layout = cy.layout({
      name: "concentric", animate: false, fit: true, padding: 30, avoidOverlap: true, minNodeSpacing: 70, spacingFactor: 1,
      concentric: (n) => maxRing - n.data("ring"), levelWidth: () => 1,
      startAngle: 3 / 2 * Math.PI, sweep: undefined, clockwise: true,
    });
    layout.one("layoutstop", () => resolve(cy));
    layout.run();
  });
}
