/* odeinfer report viewer: draws the data embedded in #oi-data (see odeinfer/report/_interactive.py)
   as inline SVG. Plain JavaScript, no library, no network; every name is set with textContent. */
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  var POST = "#555555";
  var mount = document.getElementById("oi-explorer");
  var block = document.getElementById("oi-data");
  if (!mount || !block) { return; }
  var D = JSON.parse(block.textContent);
  var shown = {};
  var colorOf = {};
  D.sources.forEach(function (s, i) { shown[s.label] = true; colorOf[s.label] = COLORS[i % COLORS.length]; });
  if (D.posterior) { shown.posterior = true; colorOf.posterior = POST; }

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function fmt(v) { return v === null || v === undefined ? "n/a" : Number(v).toPrecision(4).replace(/\.?0+$/, ""); }
  function finite(v) { return v !== null && v !== undefined && isFinite(v); }

  /* A plot frame: scales from the extent of the given values, axes with 5 ticks, labels. */
  function frame(svg, xs, ys, w, h, xlab, ylab, right) {
    var m = {l: 62, r: right || 12, t: 12, b: 40};
    function ext(v) {
      v = v.filter(finite);
      var lo = Math.min.apply(null, v), hi = Math.max.apply(null, v);
      if (!v.length) { lo = 0; hi = 1; }
      if (lo === hi) { lo -= Math.abs(lo) * 0.1 + 1e-12; hi += Math.abs(hi) * 0.1 + 1e-12; }
      var pad = 0.05 * (hi - lo);
      return [lo - pad, hi + pad];
    }
    var ex = ext(xs), ey = ext(ys);
    var f = {
      x: function (v) { return m.l + (v - ex[0]) / (ex[1] - ex[0]) * (w - m.l - m.r); },
      y: function (v) { return h - m.b - (v - ey[0]) / (ey[1] - ey[0]) * (h - m.t - m.b); }
    };
    svg.appendChild(sv("rect", {x: m.l, y: m.t, width: w - m.l - m.r, height: h - m.t - m.b,
                                fill: "none", stroke: "#999"}));
    for (var i = 0; i <= 4; i++) {
      var vx = ex[0] + (ex[1] - ex[0]) * (0.05 + 0.9 * i / 4), vy = ey[0] + (ey[1] - ey[0]) * (0.05 + 0.9 * i / 4);
      svg.appendChild(sv("text", {x: f.x(vx), y: h - m.b + 14, "text-anchor": "middle", "font-size": 10}, fmt(vx)));
      svg.appendChild(sv("text", {x: m.l - 4, y: f.y(vy) + 3, "text-anchor": "end", "font-size": 10}, fmt(vy)));
    }
    svg.appendChild(sv("text", {x: (w - m.r + m.l) / 2, y: h - 6, "text-anchor": "middle", "font-size": 12}, xlab));
    var yl = sv("text", {x: 14, y: (h - m.b) / 2, "text-anchor": "middle", "font-size": 12,
                         transform: "rotate(-90 14 " + ((h - m.b) / 2) + ")"}, ylab);
    svg.appendChild(yl);
    return f;
  }
  function pathOf(f, xs, ys, close) {
    var d = "", pen = "M";
    for (var i = 0; i < xs.length; i++) {
      if (!finite(xs[i]) || !finite(ys[i])) { pen = "M"; continue; }
      d += pen + f.x(xs[i]).toFixed(1) + "," + f.y(ys[i]).toFixed(1) + " ";
      pen = "L";
    }
    return d + (close && d ? "Z" : "");
  }
  function svgBox(w, h, label) {
    return sv("svg", {width: w, height: h, viewBox: "0 0 " + w + " " + h, role: "img", "aria-label": label});
  }
  function legend(svg, entries, x) {
    entries.forEach(function (e, i) {
      svg.appendChild(sv("rect", {x: x, y: 16 + 15 * i, width: 10, height: 10, fill: e[1]}));
      svg.appendChild(sv("text", {x: x + 14, y: 25 + 15 * i, "font-size": 11}, e[0]));
    });
  }

  /* Controls ------------------------------------------------------------------------------ */
  mount.textContent = "";
  var controls = el("div", {"class": "oi-controls"});
  var labels = D.sources.map(function (s) { return s.label; });
  if (D.posterior) { labels.push("posterior"); }
  labels.forEach(function (lab) {
    var box = el("input", {type: "checkbox", "data-source": lab});
    box.checked = true;
    box.addEventListener("change", function () { shown[lab] = box.checked; draw(); });
    var l = el("label", {style: "margin-right:1em;color:" + colorOf[lab]});
    l.appendChild(box);
    l.appendChild(document.createTextNode(" " + lab));
    controls.appendChild(l);
  });
  var pairNames = [];
  D.regions.forEach(function (r) {
    if (pairNames.indexOf(r.x) < 0) { pairNames.push(r.x); }
    if (pairNames.indexOf(r.y) < 0) { pairNames.push(r.y); }
  });
  function select(id, label, initial) {
    var s = el("select", {id: id});
    pairNames.forEach(function (n) { var o = el("option", {value: n}, n); s.appendChild(o); });
    s.value = initial;
    s.addEventListener("change", draw);
    var l = el("label", {style: "margin-left:1em"}, label + " ");
    l.appendChild(s);
    controls.appendChild(l);
    return s;
  }
  var selX = null, selY = null;
  if (pairNames.length >= 2) {
    selX = select("oi-pair-x", "x:", pairNames[0]);
    selY = select("oi-pair-y", "y:", pairNames[1]);
  }
  mount.appendChild(controls);
  var regionBox = el("div", {id: "oi-regions"});
  var intervalBox = el("div", {id: "oi-intervals"});
  var trajBox = el("div", {id: "oi-trajectories"});
  var noteBox = el("ul", {"class": "warnings"});
  D.notes.forEach(function (n) { noteBox.appendChild(el("li", {}, n)); });
  [el("h3", {}, "Confidence and credible regions (" + Math.round(100 * D.level) + "%)"), regionBox,
   el("h3", {}, "Intervals"), intervalBox, el("h3", {}, "Data and fitted trajectories"), trajBox, noteBox]
    .forEach(function (n) { mount.appendChild(n); });

  /* Regions of the chosen pair --------------------------------------------------------------- */
  function findRegion(p, q) {
    for (var i = 0; i < D.regions.length; i++) {
      var r = D.regions[i];
      if (r.x === p && r.y === q) { return {r: r, swap: false}; }
      if (r.x === q && r.y === p) { return {r: r, swap: true}; }
    }
    return null;
  }
  function drawRegions() {
    regionBox.textContent = "";
    if (!selX) { regionBox.appendChild(el("p", {"class": "meta"}, "fewer than two quantities: no regions")); return; }
    var p = selX.value, q = selY.value, found = findRegion(p, q);
    if (!found) { regionBox.appendChild(el("p", {"class": "meta"}, "choose two different quantities")); return; }
    var r = found.r, sw = found.swap;
    function xy(line) { return sw ? [line[1], line[0]] : [line[0], line[1]]; }
    var xs = [], ys = [], lines = [];
    Object.keys(r.ellipses).forEach(function (lab) {
      if (!shown[lab]) { return; }
      var l = xy(r.ellipses[lab]);
      lines.push([lab, l]);
      xs = xs.concat(l[0]); ys = ys.concat(l[1]);
    });
    var pts = [];
    D.sources.forEach(function (s) {
      if (shown[s.label] && finite(s.values[p]) && finite(s.values[q])) {
        pts.push([s.label, s.values[p], s.values[q]]);
        xs.push(s.values[p]); ys.push(s.values[q]);
      }
    });
    var post = D.posterior, draws = null, hdr = [];
    if (post && shown.posterior && post.draws[p] && post.draws[q]) {
      draws = [post.draws[p], post.draws[q]];
      xs = xs.concat(draws[0]); ys = ys.concat(draws[1]);
      hdr = r.hdr.map(xy);
    }
    var w = 760, h = 420, svg = svgBox(w, h, "regions of " + p + " and " + q);
    var f = frame(svg, xs, ys, w, h, p, q, 210);
    if (draws) {
      for (var i = 0; i < draws[0].length; i++) {
        if (finite(draws[0][i]) && finite(draws[1][i])) {
          svg.appendChild(sv("circle", {"class": "oi-draw", cx: f.x(draws[0][i]).toFixed(1),
                                        cy: f.y(draws[1][i]).toFixed(1), r: 1.8, fill: POST, "fill-opacity": 0.3}));
        }
      }
      hdr.forEach(function (l) {
        svg.appendChild(sv("path", {"class": "oi-hdr", d: pathOf(f, l[0], l[1], false), fill: "none",
                                    stroke: POST, "stroke-width": 1.6}));
      });
      var mp = post.summary[p].mean, mq = post.summary[q].mean;
      if (finite(mp) && finite(mq)) {
        svg.appendChild(sv("rect", {"class": "oi-posterior-mean", x: (f.x(mp) - 4).toFixed(1),
                                    y: (f.y(mq) - 4).toFixed(1), width: 8, height: 8, fill: POST, stroke: "white"}));
      }
    }
    lines.forEach(function (e) {
      svg.appendChild(sv("path", {"class": "oi-ellipse", "data-source": e[0], d: pathOf(f, e[1][0], e[1][1], true),
                                  fill: "none", stroke: colorOf[e[0]], "stroke-width": 1.8}));
    });
    pts.forEach(function (e) {
      svg.appendChild(sv("circle", {"class": "oi-estimate", "data-source": e[0], cx: f.x(e[1]).toFixed(1),
                                    cy: f.y(e[2]).toFixed(1), r: 4.5, fill: colorOf[e[0]], stroke: "white"}));
    });
    var entries = pts.map(function (e) { return [e[0] + " (Wald)", colorOf[e[0]]]; });
    if (draws) { entries.push(["posterior draws, mean, " + Math.round(100 * D.level) + "% HDR", POST]); }
    legend(svg, entries, w - 195);
    regionBox.appendChild(svg);
  }

  /* Intervals: one row per quantity, each on its own scale ------------------------------------- */
  function drawIntervals() {
    intervalBox.textContent = "";
    var rows = [];
    D.names.forEach(function (n) {
      var segs = [];
      Object.keys(D.intervals).forEach(function (src) {
        var key = src === "posterior" ? "posterior" : src;
        if (!shown[key] || !D.intervals[src][n]) { return; }
        Object.keys(D.intervals[src][n]).forEach(function (m) {
          var v = null;
          if (src === "posterior") { v = D.posterior && D.posterior.summary[n] ? D.posterior.summary[n].mean : null; }
          else { D.sources.forEach(function (s) { if (s.label === src) { v = s.values[n]; } }); }
          segs.push({src: src, method: m, iv: D.intervals[src][n][m], v: v});
        });
      });
      if (segs.length) { rows.push([n, segs]); }
    });
    if (!rows.length) { intervalBox.appendChild(el("p", {"class": "meta"}, "no intervals to show")); return; }
    var w = 860, rowH = 16, top = 6;
    var h = top + rows.reduce(function (a, r) { return a + (r[1].length + 1) * rowH; }, 0);
    var svg = svgBox(w, h, "intervals");
    var y = top, L = 170, R = 620;
    rows.forEach(function (row) {
      var lo = Infinity, hi = -Infinity;
      row[1].forEach(function (s) { lo = Math.min(lo, s.iv[0]); hi = Math.max(hi, s.iv[1]); });
      if (lo === hi) { lo -= 1; hi += 1; }
      function X(v) { return L + (v - lo) / (hi - lo) * (R - L); }
      svg.appendChild(sv("text", {x: 4, y: y + 11, "font-size": 12, "font-weight": "bold"}, row[0]));
      y += rowH;
      row[1].forEach(function (s) {
        var c = colorOf[s.src] || POST;
        svg.appendChild(sv("text", {x: 14, y: y + 10, "font-size": 10}, s.src + " " + s.method));
        svg.appendChild(sv("path", {"class": "oi-interval", "data-source": s.src,
                                    d: "M" + X(s.iv[0]).toFixed(1) + "," + (y + 7) + " L" + X(s.iv[1]).toFixed(1) + "," + (y + 7),
                                    stroke: c, "stroke-width": 2.5,
                                    "stroke-dasharray": (s.method === "profile" || s.method === "hdi") ? "6 3" : "none"}));
        if (finite(s.v)) { svg.appendChild(sv("circle", {cx: X(s.v).toFixed(1), cy: y + 7, r: 3, fill: c})); }
        svg.appendChild(sv("text", {x: R + 8, y: y + 10, "font-size": 10},
                           (finite(s.v) ? fmt(s.v) + "  " : "") + "[" + fmt(s.iv[0]) + ", " + fmt(s.iv[1]) + "]"));
        y += rowH;
      });
    });
    intervalBox.appendChild(svg);
  }

  /* Trajectories: one panel per observed state ------------------------------------------------ */
  function drawTrajectories() {
    trajBox.textContent = "";
    if (!D.trajectories.length) { trajBox.appendChild(el("p", {"class": "meta"}, "no trajectories to show")); return; }
    D.trajectories.forEach(function (panel) {
      var xs = panel.t.slice(), ys = panel.y.slice(), fits = [];
      Object.keys(panel.fits).forEach(function (lab) {
        if (!shown[lab]) { return; }
        var fit = panel.fits[lab];
        fits.push([lab, fit]);
        xs = xs.concat(fit.t); ys = ys.concat(fit.y, fit.lo || [], fit.hi || []);
      });
      var w = 760, h = 260, svg = svgBox(w, h, "trajectories of " + panel.state);
      var f = frame(svg, xs, ys, w, h, "t", panel.state, 210);
      fits.forEach(function (e) {
        var fit = e[1];
        if (fit.lo && fit.hi) {
          svg.appendChild(sv("path", {"class": "oi-band", d: pathOf(f, fit.t.concat(fit.t.slice().reverse()),
                                                                  fit.lo.concat(fit.hi.slice().reverse()), true),
                                      fill: colorOf[e[0]], "fill-opacity": 0.18, stroke: "none"}));
        }
        svg.appendChild(sv("path", {"class": "oi-fit", "data-source": e[0], d: pathOf(f, fit.t, fit.y, false),
                                    fill: "none", stroke: colorOf[e[0]], "stroke-width": 1.6}));
      });
      for (var i = 0; i < panel.t.length; i++) {
        if (finite(panel.y[i])) {
          svg.appendChild(sv("circle", {"class": "oi-data", cx: f.x(panel.t[i]).toFixed(1),
                                        cy: f.y(panel.y[i]).toFixed(1), r: 2.8, fill: "black"}));
        }
      }
      legend(svg, [["data", "black"]].concat(fits.map(function (e) { return [e[0], colorOf[e[0]]]; })), w - 195);
      trajBox.appendChild(svg);
    });
  }

  function draw() { drawRegions(); drawIntervals(); drawTrajectories(); }
  draw();
  mount.setAttribute("data-ready", "1");
})();
