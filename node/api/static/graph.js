// tsched dashboard: a workflow's steps as a picture (DESIGN 5.2). Each step is a box in
// the column of its depth (the longest chain of deps above it), coloured by its state, with
// a line from each parent. Drawn for workflows of up to GRAPH_STEPS_MAX steps; larger ones
// show their table only. Every value goes into the picture as text, never as markup.
"use strict";
const TschedGraph = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const GRAPH_STEPS_MAX = 300;
  const BOX_W = 120, BOX_H = 22, GAP_X = 40, GAP_Y = 8, PAD = 4;

  function el(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // Depth of each step by name: steps come in any order, so in Kahn's order over the deps.
  function depths(steps) {
    const depth = new Map(), waiting = new Map(), children = new Map();
    for (const s of steps) { waiting.set(s.name, (s.deps || []).length); children.set(s.name, []); }
    for (const s of steps) for (const d of s.deps || []) (children.get(d) || []).push(s.name);
    const ready = steps.filter((s) => !(s.deps || []).length).map((s) => s.name);
    for (const n of ready) depth.set(n, 0);
    while (ready.length) {
      const n = ready.pop();
      for (const c of children.get(n)) {
        depth.set(c, Math.max(depth.get(c) || 0, depth.get(n) + 1));
        waiting.set(c, waiting.get(c) - 1);
        if (waiting.get(c) === 0) ready.push(c);
      }
    }
    return depth;
  }

  function draw(workflow) {
    const steps = workflow.steps || [];
    if (!steps.length || steps.length > GRAPH_STEPS_MAX) return null;
    const depth = depths(steps), at = new Map(), rows = [];
    for (const s of steps) {
      const col = depth.get(s.name) || 0;
      rows[col] = (rows[col] || 0) + 1;
      at.set(s.name, { x: PAD + col * (BOX_W + GAP_X), y: PAD + (rows[col] - 1) * (BOX_H + GAP_Y) });
    }
    const width = PAD * 2 + rows.length * (BOX_W + GAP_X) - GAP_X;
    const height = PAD * 2 + Math.max(...rows.map((n) => n || 0)) * (BOX_H + GAP_Y) - GAP_Y;
    const svg = el("svg", { class: "workflow-graph", width, height, viewBox: `0 0 ${width} ${height}` });
    for (const s of steps) {
      for (const d of s.deps || []) {
        const a = at.get(d), b = at.get(s.name);
        svg.append(el("line", { class: "edge", x1: a.x + BOX_W, y1: a.y + BOX_H / 2, x2: b.x, y2: b.y + BOX_H / 2 }));
      }
    }
    for (const s of steps) {
      const p = at.get(s.name);
      const g = el("g", { class: `step ${s.state}`, "data-step": s.name });
      g.append(el("title", {}, `${s.name}: ${s.state}`));
      g.append(el("rect", { x: p.x, y: p.y, width: BOX_W, height: BOX_H, rx: 4 }));
      g.append(el("text", { x: p.x + 6, y: p.y + BOX_H / 2 + 4 },
        s.name.length > 16 ? `${s.name.slice(0, 15)}…` : s.name));
      svg.append(g);
    }
    return svg;
  }

  return { draw, GRAPH_STEPS_MAX };
})();
