// Injected into a copy of report.html by TestReportLayoutInChromium; runs in
// headless Chromium after layout and writes what is wrong, as JSON, into
// <pre id="layout-check">. Every check reads boxes from the DOM/SVG.
// It waits for the fonts the SVGs embed: measured before they load, every label
// has the fallback font's (wider) box.
document.fonts.ready.then(function () {
  const probs = [];
  const W = document.documentElement.clientWidth;
  const box = (e) => e.getBoundingClientRect();
  const label = (e) => {
    const f = e.closest("figure");
    return (f ? f.id + " " : "") + JSON.stringify((e.textContent || "").trim().slice(0, 50));
  };
  const px = (v) => v.toFixed(1);
  const overlap = (a, b, tol) =>
    Math.min(a.right, b.right) - Math.max(a.left, b.left) > tol &&
    Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > tol;

  // Text outside the page: nothing may stick out left or right.
  if (document.documentElement.scrollWidth > W + 1)
    probs.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} px of content in a ${W} px window`);
  const svgText = [...document.querySelectorAll("svg text")].filter((t) => t.textContent.trim() !== "");
  const htmlText = [...document.body.querySelectorAll("h1,h2,p,td,th,dt,dd,code,figcaption")];
  for (const e of [...svgText, ...htmlText]) {
    const r = box(e);
    if (r.width > 0 && (r.left < -0.5 || r.right > W + 0.5))
      probs.push(`outside the page: ${label(e)} spans x ${px(r.left)}..${px(r.right)}, the page 0..${W}`);
  }

  for (const svg of document.querySelectorAll("svg")) {
    const s = box(svg);
    const texts = [...svg.querySelectorAll("text")].filter((t) => t.textContent.trim() !== "").map((t) => [t, box(t)]);
    // Clipped: a label that does not fit in its chart is cut at the edge.
    for (const [t, r] of texts)
      if (r.left < s.left - 0.5 || r.right > s.right + 0.5 || r.top < s.top - 0.5 || r.bottom > s.bottom + 0.5)
        probs.push(`clipped: ${label(t)} at x ${px(r.left)}..${px(r.right)} y ${px(r.top)}..${px(r.bottom)}, its chart x ${px(s.left)}..${px(s.right)} y ${px(s.top)}..${px(s.bottom)}`);
    // Overlapping labels (a font's box is taller than its glyphs: 1.5 px of slack).
    for (let i = 0; i < texts.length; i++)
      for (let j = i + 1; j < texts.length; j++)
        if (overlap(texts[i][1], texts[j][1], 1.5)) probs.push(`overlap: ${label(texts[i][0])} (y ${px(texts[i][1].top)}..${px(texts[i][1].bottom)}) and ${label(texts[j][0])} (y ${px(texts[j][1].top)}..${px(texts[j][1].bottom)})`);
    // The plotted area: the grid, i.e. the straight axis-parallel lines that cross
    // at least 40% of the chart. No text may sit in it (legends go beside it).
    let area = null;
    for (const p of svg.querySelectorAll("path")) {
      const pts = (p.getAttribute("d") || "").match(/-?[0-9.]+,-?[0-9.]+/g);
      if (!pts || pts.length !== 2) continue;
      const r = box(p);
      const long = (r.width < 1 && r.height > 0.4 * s.height) || (r.height < 1 && r.width > 0.4 * s.width);
      if (!long) continue;
      area = area
        ? { left: Math.min(area.left, r.left), right: Math.max(area.right, r.right), top: Math.min(area.top, r.top), bottom: Math.max(area.bottom, r.bottom) }
        : { left: r.left, right: r.right, top: r.top, bottom: r.bottom };
    }
    if (!area) probs.push(`${label(svg.closest("figure") || svg)}: no grid found to tell the plotted area`);
    else
      for (const [t, r] of texts)
        if (overlap(r, area, 0.5)) probs.push(`inside the plotted area: ${label(t)}`);
  }

  // Each chart once: a chart whose every label appears in another SVG is shown
  // twice (alone and inside a combined figure, or twice alone).
  const svgs = [...document.querySelectorAll("svg")];
  const words = svgs.map((g) => [...g.querySelectorAll("text")].map((t) => t.textContent.trim()).filter((x) => x !== ""));
  for (let a = 0; a < svgs.length; a++)
    for (let b = 0; b < svgs.length; b++) {
      if (a === b || words[a].length === 0) continue;
      const left = [...words[b]];
      const inside = words[a].every((w) => { const i = left.indexOf(w); if (i < 0) return false; left.splice(i, 1); return true; });
      if (inside) probs.push(`chart shown twice: every label of ${label(svgs[a].closest("figure") || svgs[a]).split(" ")[0]} (${JSON.stringify(words[a][0])}...) is also in ${(svgs[b].closest("figure") || {}).id}`);
    }
  const seen = {};
  for (const f of document.querySelectorAll("figure")) seen[f.id] = true;
  const pre = document.createElement("pre");
  pre.id = "layout-check";
  pre.textContent = JSON.stringify({ charts: Object.keys(seen).length, texts: svgText.length, problems: probs });
  document.body.appendChild(pre);
});
