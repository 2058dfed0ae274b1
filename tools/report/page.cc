// The static part of `tally report`'s page: CSS and the JavaScript that draws the embedded
// data (html.cc) into SVG. No library and no network: a page that opens anywhere,
// years later. Every piece of text from the run goes in through textContent, never as
// markup. After drawing, <body data-charts="N"> counts the charts drawn and #errors holds
// any exception, which is what tests/tools/report_test.py checks in headless Chromium.
#include "tools/report/html.h"

namespace tally {

const char kReportPageTemplate[] = R"PAGE(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Tally report</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2330;
       margin: 0 auto; max-width: 1120px; padding: 12px 20px 60px; background: #fff; }
h1 { font-size: 22px; margin: 8px 0 2px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #d8dce3; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 4px; }
nav a { margin-right: 14px; color: #2d5fa8; text-decoration: none; }
.sub, .note { color: #5b6475; font-size: 13px; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 13px; }
th, td { text-align: left; padding: 3px 10px 3px 0; vertical-align: top; border-bottom: 1px solid #eef0f4; }
th { color: #5b6475; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.kv th { width: 150px; }
table.findings td { max-width: 330px; }
td.evidence { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; color: #3c4454; }
td.rule { font-weight: 600; white-space: nowrap; }
figure.chart { margin: 10px 0 22px; }
figcaption { font-weight: 600; }
svg.plot { width: 100%; height: auto; display: block; }
svg text { font: 11px system-ui, sans-serif; fill: #4a5263; }
.legend { font-size: 12px; margin: 2px 0; }
.legend span.key { display: inline-block; margin-right: 12px; }
.legend i { display: inline-block; width: 11px; height: 11px; margin-right: 4px; vertical-align: -1px; }
.readout { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; color: #3c4454; min-height: 16px; }
#errors { color: #a4161a; background: #fff0f0; border: 1px solid #e5a0a0; padding: 8px; white-space: pre-wrap; }
#errors:empty { display: none; }
details { margin: 6px 0; }
</style>
</head>
<body>
<h1 id="title">Tally report</h1>
<div class="sub" id="subtitle"></div>
<nav><a href="#summary">Summary</a><a href="#findings">Findings</a><a href="#steps">Step time</a><a
href="#training">Loss and accuracy</a><a href="#servers">Server load</a><a href="#system">System use</a></nav>
<div id="errors"></div>
<section id="summary"><h2>Job summary</h2></section>
<section id="findings"><h2>Findings</h2></section>
<section id="steps"><h2>Step time, per worker</h2></section>
<section id="training"><h2>Loss and accuracy</h2></section>
<section id="servers"><h2>Server load</h2></section>
<section id="system"><h2>System use, per node</h2></section>
<script type="application/json" id="report-data">@DATA@</script>
<script>
(function () {
'use strict';
let charts = 0, clipIds = 0;
const errors = document.getElementById('errors');
function fail(where, e) {
  const line = document.createElement('div');
  line.textContent = where + ': ' + (e && e.stack ? e.stack : String(e));
  errors.appendChild(line);
}
window.addEventListener('error', ev => fail('page', ev.error || ev.message));

const NS = 'http://www.w3.org/2000/svg';
function h(tag, attrs, text, parent) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text != null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function s(tag, attrs, parent, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text != null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
const PHASES = ['data', 'h2d', 'fwd', 'bwd', 'push', 'pull', 'wait', 'other'];
const PHASE_COLOR = {data: '#e15759', h2d: '#f28e2b', fwd: '#4e79a7', bwd: '#76b7b2', push: '#59a14f',
                     pull: '#8cd17d', wait: '#b07aa1', other: '#bab0ac'};
const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7',
                 '#9c755f', '#bab0ac'];
const W = 880;

function fmt(v, unit) {
  if (v == null || !isFinite(v)) return '–';
  const a = Math.abs(v);
  const t = a >= 1000 ? v.toFixed(0) : a >= 100 ? v.toFixed(1) : a >= 1 ? v.toFixed(2) : v.toFixed(3);
  return unit ? t + ' ' + unit : t;
}
function tickText(v) {
  const a = Math.abs(v);
  if (a >= 1e6) return +(v / 1e6).toPrecision(4) + 'M';
  if (a >= 1e4) return +(v / 1e3).toPrecision(4) + 'k';
  return String(+v.toPrecision(6));
}
function timeText(sec) {
  if (Math.abs(sec) < 120) return tickText(sec) + ' s';
  const m = Math.floor(sec / 60), r = Math.round(sec - m * 60);
  return m + ':' + (r < 10 ? '0' : '') + r;
}
function ticks(lo, hi, n) {
  if (!(hi > lo)) hi = lo + 1;
  let step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
  const r = (hi - lo) / n / step;
  step *= r >= 7.5 ? 10 : r >= 3.5 ? 5 : r >= 1.5 ? 2 : 1;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toFixed(10));
  return out;
}
function finite(xs) { return xs.filter(v => v != null && isFinite(v)); }
function maxOf(xs) { const f = finite(xs); return f.length ? Math.max.apply(null, f) : 0; }
function legend(parent, items) {
  const box = h('div', {class: 'legend'}, null, parent);
  for (const it of items) {
    const k = h('span', {class: 'key'}, null, box);
    h('i', {style: it.dash ? 'height:0;border-top:2px dashed ' + it.color : 'background:' + it.color}, null, k);
    k.appendChild(document.createTextNode(it.name));
  }
}
function nearest(xs, v) {
  let lo = 0, hi = xs.length - 1;
  while (hi - lo > 1) { const m = (lo + hi) >> 1; if (xs[m] <= v) lo = m; else hi = m; }
  return Math.abs(xs[hi] - v) < Math.abs(xs[lo] - v) ? hi : lo;
}

// A figure with a caption, an SVG with axes and grid, scales x() and y(), a clipped plot
// group, and a readout line that follows the mouse (o.readout(i) for the point nearest it).
function frame(parent, o) {
  const fig = h('figure', {class: 'chart'}, null, parent);
  h('figcaption', null, o.title, fig);
  if (o.note) h('div', {class: 'note'}, o.note, fig);
  if (o.legend) legend(fig, o.legend);
  const H = o.height || 220, ML = o.left || 62, MR = 16, MT = 8, MB = 32;
  const svg = s('svg', {viewBox: '0 0 ' + W + ' ' + H, class: 'plot', role: 'img'}, fig);
  s('title', null, svg, o.title);
  const f = {fig: fig, svg: svg, H: H, left: ML, top: MT, right: W - MR, bottom: H - MB};
  const x0 = o.x0, x1 = o.x1 > o.x0 ? o.x1 : o.x0 + 1, y0 = o.y0 || 0, y1 = o.y1 > y0 ? o.y1 : y0 + 1;
  f.x = v => ML + (v - x0) / (x1 - x0) * (f.right - ML);
  f.y = v => f.bottom - (v - y0) / (y1 - y0) * (f.bottom - MT);
  if (!o.noYAxis) {
    for (const t of ticks(y0, y1, 5)) {
      s('line', {x1: ML, x2: f.right, y1: f.y(t), y2: f.y(t), stroke: '#e6e9ef'}, svg);
      s('text', {x: ML - 6, y: f.y(t) + 4, 'text-anchor': 'end'}, svg, tickText(t));
    }
  }
  for (const t of o.noXTicks ? [] : ticks(x0, x1, 8)) {
    s('line', {x1: f.x(t), x2: f.x(t), y1: f.bottom, y2: f.bottom + 4, stroke: '#8a93a5'}, svg);
    s('text', {x: f.x(t), y: f.bottom + 16, 'text-anchor': 'middle'}, svg, o.time ? timeText(t) : tickText(t));
  }
  s('line', {x1: ML, x2: f.right, y1: f.bottom, y2: f.bottom, stroke: '#8a93a5'}, svg);
  if (o.yLabel) s('text', {x: 12, y: MT + (f.bottom - MT) / 2, transform: 'rotate(-90 12 ' + (MT + (f.bottom - MT) / 2) + ')',
                           'text-anchor': 'middle'}, svg, o.yLabel);
  if (o.xLabel) s('text', {x: f.right, y: H - 2, 'text-anchor': 'end'}, svg, o.xLabel);
  const id = 'clip' + (++clipIds);
  const cp = s('clipPath', {id: id}, s('defs', null, svg));
  s('rect', {x: ML, y: MT, width: f.right - ML, height: f.bottom - MT}, cp);
  f.g = s('g', {'clip-path': 'url(#' + id + ')'}, svg);
  f.readout = h('div', {class: 'readout'}, '\u00a0', fig);
  if (o.xs && o.readout) {
    const cursor = s('line', {y1: MT, y2: f.bottom, stroke: '#1d2330', 'stroke-width': 0.6, visibility: 'hidden'}, svg);
    svg.addEventListener('mousemove', ev => {
      const r = svg.getBoundingClientRect();
      const vx = (ev.clientX - r.left) * W / r.width;
      const i = nearest(o.xs, x0 + (vx - ML) / (f.right - ML) * (x1 - x0));
      cursor.setAttribute('x1', f.x(o.xs[i]));
      cursor.setAttribute('x2', f.x(o.xs[i]));
      cursor.setAttribute('visibility', 'visible');
      f.readout.textContent = o.readout(i);
    });
    svg.addEventListener('mouseleave', () => cursor.setAttribute('visibility', 'hidden'));
  }
  return f;
}

// A polyline through (xs[i], ys[i]), broken where a value is missing.
function linePath(f, xs, ys) {
  let d = '', pen = false;
  for (let i = 0; i < xs.length; i++) {
    if (ys[i] == null || !isFinite(ys[i])) { pen = false; continue; }
    d += (pen ? 'L' : 'M') + f.x(xs[i]).toFixed(1) + ' ' + f.y(ys[i]).toFixed(1);
    pen = true;
  }
  return d;
}

// Lines over a shared x: o.series = [{name, ys, color, dash}].
function lineChart(parent, o) {
  const xs = o.xs;
  const y1 = o.y1 != null ? o.y1 : Math.max.apply(null, o.series.map(se => maxOf(se.ys))) * 1.08;
  const f = frame(parent, Object.assign({}, o, {x0: xs[0], x1: xs[xs.length - 1], y0: 0, y1: y1,
    legend: o.series.map(se => ({name: se.name, color: se.color, dash: se.dash})),
    readout: i => (o.time ? 't=' + timeText(xs[i]) : 'step ' + xs[i]) + '  ' +
      o.series.map(se => se.name + ' ' + fmt(se.ys[i], o.unit)).join(', ')}));
  for (const se of o.series) {
    const p = s('path', {d: linePath(f, xs, se.ys), fill: 'none', stroke: se.color, 'stroke-width': 1.5}, f.g);
    if (se.dash) p.setAttribute('stroke-dasharray', '5 3');
  }
  charts++;
  return f;
}

// A worker's step time split over its steps: stacked bars (few points) or areas.
function stepChart(parent, w) {
  const n = w.step.length, xs = w.step;
  const tops = xs.map((_, i) => PHASES.reduce((a, p) => a + (w[p][i] || 0), 0));
  const y1 = Math.max(maxOf(tops), 1e-3) * 1.12;
  const span = n > 1 ? xs[n - 1] - xs[0] : 1;
  const x0 = n > 1 ? xs[0] - span / (2 * n) : xs[0] - 1, x1 = n > 1 ? xs[n - 1] + span / (2 * n) : xs[0] + 1;
  const f = frame(parent, {title: w.node + (w.host ? ' (' + w.host + ')' : '') + ': time per step by phase',
    note: w.per > 1 ? 'each point is the mean of ' + w.per + ' consecutive steps; the dashed line is the slowest of them' : '',
    legend: PHASES.map(p => ({name: p, color: PHASE_COLOR[p]})).concat(
      w.per > 1 ? [{name: 'slowest step', color: '#1d2330'}] : []),
    xs: xs, x0: x0, x1: x1, y0: 0, y1: y1, yLabel: 'ms', xLabel: 'step',
    readout: i => 'step ' + xs[i] + ' (t=' + timeText(w.t[i]) + '): ' + fmt(w.dur[i], 'ms') + ' = ' +
      PHASES.map(p => p + ' ' + fmt(w[p][i])).join(', ') + '; slowest ' + fmt(w.dur_max[i], 'ms')});
  const bottoms = xs.map(() => 0);
  const barW = Math.max(1, (f.x(x1) - f.x(x0)) / Math.max(n, 1) * 0.85);
  for (const p of PHASES) {
    const vals = w[p].map(v => v || 0);
    if (n <= 120) {
      for (let i = 0; i < n; i++) {
        if (vals[i] <= 0) continue;
        s('rect', {x: f.x(xs[i]) - barW / 2, width: barW, y: f.y(bottoms[i] + vals[i]),
                   height: Math.max(0.5, f.y(bottoms[i]) - f.y(bottoms[i] + vals[i])), fill: PHASE_COLOR[p]}, f.g);
      }
    } else {
      let d = '';
      for (let i = 0; i < n; i++) d += (i ? 'L' : 'M') + f.x(xs[i]).toFixed(1) + ' ' + f.y(bottoms[i] + vals[i]).toFixed(1);
      for (let i = n - 1; i >= 0; i--) d += 'L' + f.x(xs[i]).toFixed(1) + ' ' + f.y(bottoms[i]).toFixed(1);
      s('path', {d: d + 'Z', fill: PHASE_COLOR[p], stroke: 'none'}, f.g);
    }
    for (let i = 0; i < n; i++) bottoms[i] += vals[i];
  }
  if (w.per > 1) {
    s('path', {d: linePath(f, xs, w.dur_max), fill: 'none', stroke: '#1d2330', 'stroke-width': 1,
               'stroke-dasharray': '3 2'}, f.g);
  }
  charts++;
}

// Horizontal stacked bars: one row per worker, the mean split of its steps.
function splitChart(parent, split) {
  const rowH = 26, H = split.length * rowH + 44;
  const x1 = Math.max.apply(null, split.map(r => PHASES.reduce((a, p) => a + (r[p] || 0), 0))) * 1.1;
  const f = frame(parent, {title: 'Where a step\'s time goes: mean per worker', height: H, left: 90,
    note: 'after the first ' + DATA.warmup + ' (warm-up) steps; hover a segment for its figures',
    legend: PHASES.map(p => ({name: p, color: PHASE_COLOR[p]})), x0: 0, x1: x1, noYAxis: true, xLabel: 'ms per step'});
  split.forEach((r, k) => {
    const y = f.top + 6 + k * rowH;
    s('text', {x: f.left - 6, y: y + 14, 'text-anchor': 'end'}, f.svg, r.node);
    let at = 0;
    const total = PHASES.reduce((a, p) => a + (r[p] || 0), 0);
    for (const p of PHASES) {
      const v = r[p] || 0;
      if (v <= 0) continue;
      const rect = s('rect', {x: f.x(at), y: y, width: Math.max(0.5, f.x(at + v) - f.x(at)), height: rowH - 8,
                              fill: PHASE_COLOR[p]}, f.g);
      s('title', null, rect, r.node + ' ' + p + ': ' + fmt(v, 'ms') + ' (' + (100 * v / total).toFixed(1) + '%)');
      at += v;
    }
    s('text', {x: f.x(at) + 4, y: y + 14}, f.svg, fmt(r.dur, 'ms'));
  });
  charts++;
}

const LEVELS = 24;
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
function heatColor(level) {
  if (level < 0) return '#eef0f4';
  const u = level / LEVELS * (VIRIDIS.length - 1), k = Math.min(Math.floor(u), VIRIDIS.length - 2), r = u - k;
  const c = VIRIDIS[k].map((a, j) => Math.round(a + (VIRIDIS[k + 1][j] - a) * r));
  return 'rgb(' + c.join(',') + ')';
}

// Rows (cores, GPUs) by columns (samples at times ts), colour = value / max. Cells of one
// colour next to each other are drawn as one rectangle, which keeps the SVG small.
function heatmap(parent, o) {
  const ts = o.ts, n = ts.length, rows = o.rows;
  const dt = n > 1 ? (ts[n - 1] - ts[0]) / (n - 1) : 1;
  const rowH = Math.max(3, Math.min(16, Math.floor(180 / rows.length)));
  const keys = [0, 25, 50, 75, 100].map(p => ({name: p + '%', color: heatColor(Math.round(p / 100 * LEVELS))}));
  const f = frame(parent, {title: o.title, note: o.note, legend: keys, height: rows.length * rowH + 42, left: 62,
    x0: ts[0], x1: ts[n - 1] + dt, time: true, noYAxis: true, xLabel: 'time since the run began', xs: ts,
    readout: i => 't=' + timeText(ts[i]) + '  ' + rows.map((r, k) => o.rowName(k) + ' ' + fmt(r[i])).join(', ')});
  rows.forEach((row, k) => {
    const y = f.top + k * rowH;
    if (rows.length <= 16 || k % Math.ceil(rows.length / 16) === 0) {
      s('text', {x: f.left - 6, y: y + Math.min(rowH, 12) - 1, 'text-anchor': 'end'}, f.svg, o.rowName(k));
    }
    let c = 0;
    while (c < n) {
      const level = row[c] == null ? -1 : Math.max(0, Math.min(LEVELS, Math.round(row[c] / o.max * LEVELS)));
      let e = c + 1;
      while (e < n && (row[e] == null ? -1 : Math.max(0, Math.min(LEVELS, Math.round(row[e] / o.max * LEVELS)))) === level) e++;
      const xa = f.x(ts[c]), xb = e < n ? f.x(ts[e]) : f.x(ts[n - 1] + dt);
      s('rect', {x: xa.toFixed(1), y: y, width: Math.max(0.5, xb - xa).toFixed(1), height: rowH - (rowH > 4 ? 1 : 0),
                 fill: heatColor(level)}, f.g);
      c = e;
    }
  });
  charts++;
}

// Values of `key` of a worker or server, on the steps xs (null where it has none).
function onSteps(xs, v, key) {
  const at = new Map(v.step.map((x, i) => [x, i]));
  return xs.map(x => at.has(x) ? v[key][at.get(x)] : null);
}

// Grouped vertical bars: one group per category, one bar per series.
function barChart(parent, o) {
  const k = o.series.length, n = o.categories.length;
  const y1 = Math.max.apply(null, o.series.map(se => maxOf(se.values))) * 1.15;
  const f = frame(parent, {title: o.title, note: o.note, legend: o.series.map(se => ({name: se.name, color: se.color})),
    height: 200, x0: 0, x1: n, y0: 0, y1: y1, yLabel: o.unit, noXTicks: true});
  o.categories.forEach((cat, i) => {
    s('text', {x: f.x(i + 0.5), y: f.bottom + 16, 'text-anchor': 'middle'}, f.svg, cat);
    o.series.forEach((se, j) => {
      const v = se.values[i] || 0, bw = 0.8 / k;
      const rect = s('rect', {x: f.x(i + 0.1 + j * bw), width: f.x(bw) - f.x(0) - 1, y: f.y(v),
                              height: Math.max(0.5, f.y(0) - f.y(v)), fill: se.color}, f.g);
      s('title', null, rect, cat + ' ' + se.name + ': ' + fmt(v, o.unit));
    });
  });
  charts++;
}

function table(parent, cls, head, rows, numeric) {
  const t = h('table', {class: cls}, null, parent);
  const tr = h('tr', null, null, h('thead', null, null, t));
  head.forEach((c, i) => h('th', numeric && numeric[i] ? {class: 'num'} : null, c, tr));
  const body = h('tbody', null, null, t);
  for (const r of rows) {
    const row = h('tr', null, null, body);
    r.forEach((c, i) => h('td', numeric && numeric[i] ? {class: 'num'} : null, c == null ? '' : String(c), row));
  }
  return t;
}

function summary(sec) {
  const t = h('table', {class: 'kv'}, null, sec);
  for (const r of DATA.summary.rows) {
    const tr = h('tr', null, null, t);
    h('th', null, r[0], tr);
    h('td', null, r[1], tr);
  }
  if (DATA.split.length) {
    splitChart(sec, DATA.split);
    table(sec, 'split', ['worker', 'steps'].concat(PHASES).concat(['step']),
      DATA.split.map(r => [r.node, r.steps].concat(PHASES.map(p => fmt(r[p]) + ' ms (' +
        (100 * (r[p] || 0) / (r.dur || 1)).toFixed(0) + '%)')).concat([fmt(r.dur, 'ms')])),
      [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
  }
  h('h3', null, 'Nodes', sec);
  table(sec, 'nodes', ['node', 'role', 'host', 'pid', 'clock offset', 'round trip', 'steps', 'samples', 'findings'],
    DATA.nodes.map(n => [n.node, n.role, n.host, n.pid, fmt(n.offset_ms, 'ms'), n.rtt_ms == null ? 'unmeasured'
      : fmt(n.rtt_ms, 'ms'), n.steps, n.samples, n.findings]), [0, 0, 0, 1, 1, 1, 1, 1, 1]);
  const cfg = Object.keys(DATA.summary.config);
  if (cfg.length) {
    const d = h('details', null, null, sec);
    h('summary', null, 'Configuration (' + cfg.length + ' settings)', d);
    table(d, 'kv', ['setting', 'value'], cfg.map(k => [k, DATA.summary.config[k]]));
  }
}

function findings(sec) {
  const head = ['rule', 'node', 'step', 'what is wrong', 'what to change', 'evidence'];
  const row = f => [f.rule, f.node, f.step >= 0 ? f.step : 'whole run', f.message, f.advice, f.evidence];
  if (!DATA.findings.length) {
    h('p', null, 'No rule fired over the whole run.', sec);
  } else {
    const t = table(sec, 'findings', head, DATA.findings.map(row));
    t.querySelectorAll('tbody tr').forEach(tr => {
      tr.cells[0].className = 'rule';
      tr.cells[5].className = 'evidence';
    });
  }
  const on = DATA.online_findings;
  const d = h('details', null, null, sec);
  h('summary', null, on.length + ' finding(s) printed while training (each node\'s own view)', d);
  if (on.length) table(d, 'findings', head, on.map(row));
}

function steps(sec) {
  const ws = DATA.workers.filter(w => w.step.length);
  if (!ws.length) { h('p', null, 'No worker recorded a step.', sec); return; }
  h('p', {class: 'note'}, 'data: waiting for the input pipeline; h2d: copy to the device; fwd, bwd: compute; ' +
    'push, pull: issuing gradients and copying weights in; wait: blocked on the servers and the other workers; ' +
    'other: the rest of the step.', sec);
  for (const w of ws) stepChart(sec, w);
}

function training(sec) {
  const ws = DATA.workers.filter(w => finite(w.loss).length);
  if (!ws.length) { h('p', null, 'No worker recorded a loss.', sec); return; }
  // Every worker's line on the first worker's steps (in a synchronous job they are the same).
  const xs = ws[0].step;
  const note = ws[0].per > 1 ? 'each point is the mean of ' + ws[0].per + ' steps (NaN and Inf left out)' : '';
  for (const [key, title] of [['loss', 'Training loss'], ['acc', 'Training accuracy (top-1)']]) {
    const o = {title: title + ' per step, per worker', xs: xs, xLabel: 'step', yLabel: key, note: note,
      series: ws.map((w, k) => ({name: w.node, color: PALETTE[k % PALETTE.length], ys: onSteps(xs, w, key)}))};
    if (key === 'acc') o.y1 = 1;
    lineChart(sec, o);
  }
}

function servers(sec) {
  const ss = DATA.servers.filter(v => v.step.length);
  if (!ss.length) { h('p', null, 'No server recorded a step (a single-process kvstore has none).', sec); return; }
  const xs = ss[0].step;
  const at = (v, key) => onSteps(xs, v, key);
  lineChart(sec, {title: 'Server time per step: summing pushes (solid) and the optimizer update (dashed)', xs: xs,
    xLabel: 'step', yLabel: 'ms', unit: 'ms', note: ss[0].per > 1 ? 'each point is the mean of ' + ss[0].per + ' steps' : '',
    series: [].concat.apply([], ss.map((v, k) => [
      {name: v.node + ' sum', ys: at(v, 'sum'), color: PALETTE[k % PALETTE.length]},
      {name: v.node + ' update', ys: at(v, 'update'), color: PALETTE[k % PALETTE.length], dash: true}]))});
  lineChart(sec, {title: 'Bytes per step: received (solid) and sent (dashed)', xs: xs, xLabel: 'step', yLabel: 'MB',
    unit: 'MB', series: [].concat.apply([], ss.map((v, k) => [
      {name: v.node + ' in', ys: at(v, 'mb_in'), color: PALETTE[k % PALETTE.length]},
      {name: v.node + ' out', ys: at(v, 'mb_out'), color: PALETTE[k % PALETTE.length], dash: true}]))});
  const names = ss.map(v => v.node);
  barChart(sec, {title: 'Total server time over the run', categories: names, unit: 's',
    note: 'a balanced job has bars of one height',
    series: [{name: 'sum', values: ss.map(v => v.sum_s), color: '#4e79a7'},
             {name: 'update', values: ss.map(v => v.update_s), color: '#f28e2b'}]});
  barChart(sec, {title: 'Total bytes over the run', categories: names, unit: 'GB',
    series: [{name: 'received', values: ss.map(v => v.gb_in), color: '#59a14f'},
             {name: 'sent', values: ss.map(v => v.gb_out), color: '#b07aa1'}]});
  table(sec, 'servers', ['server', 'steps', 'sum', 'update', 'received', 'sent', 'requests'],
    ss.map(v => [v.node, v.steps, fmt(v.sum_s, 's'), fmt(v.update_s, 's'), fmt(v.gb_in, 'GB'), fmt(v.gb_out, 'GB'),
                 v.total_requests]), [0, 1, 1, 1, 1, 1, 1]);
}

function system(sec) {
  if (!DATA.system.length) { h('p', null, 'No node recorded system samples (--monitor-interval-ms 0?).', sec); return; }
  const byHost = {};
  h('p', {class: 'note'}, 'Machine-wide figures: nodes on one host show the same machine, each from its own samples.', sec);
  for (const m of DATA.system) {
    const box = h('div', {class: 'node'}, null, sec);
    h('h3', null, m.node + ' on ' + (m.host || '?') + (byHost[m.host] ? ' (the host of ' + byHost[m.host] + ')' : ''), box);
    byHost[m.host] = byHost[m.host] || m.node;
    const per = m.per > 1 ? 'each column is the mean of ' + m.per + ' samples' : '';
    if (m.cores.length) {
      heatmap(box, {title: 'CPU busy per core (%)', note: per, ts: m.t, rows: m.cores, max: 100,
                    rowName: k => 'cpu' + k});
    }
    const cores = Math.max(1, m.cores.length);
    lineChart(box, {title: 'CPU, iowait and memory (% of the machine)', xs: m.t, time: true, y1: 100, unit: '%',
      xLabel: 'time since the run began', yLabel: '%', series: [
        {name: 'CPU busy', ys: m.cpu_total, color: '#4e79a7'},
        {name: 'iowait', ys: m.iowait, color: '#e15759'},
        {name: 'this tally process', ys: m.proc_cpu.map(v => v == null ? null : v / cores), color: '#59a14f'},
        {name: 'memory used (of ' + fmt(m.mem_total_gb, 'GB') + ')', ys: m.mem, color: '#b07aa1', dash: true}]});
    lineChart(box, {title: 'Network and disk (MB/s)', xs: m.t, time: true, unit: 'MB/s',
      xLabel: 'time since the run began', yLabel: 'MB/s', series: [
        {name: 'net rx', ys: m.net_rx, color: '#4e79a7'}, {name: 'net tx', ys: m.net_tx, color: '#f28e2b'},
        {name: 'disk read', ys: m.disk_r, color: '#59a14f', dash: true},
        {name: 'disk write', ys: m.disk_w, color: '#e15759', dash: true}]});
    if (m.gpu_util.length) {
      heatmap(box, {title: 'GPU utilisation (%)', note: per, ts: m.t, rows: m.gpu_util, max: 100, rowName: k => 'gpu' + k});
      lineChart(box, {title: 'GPU memory used (% of ' + fmt(m.gpu_mem_total_gb, 'GB') + ')', xs: m.t, time: true,
        y1: 100, unit: '%', yLabel: '%', series: m.gpu_mem.map((ys, k) => ({name: 'gpu' + k, ys: ys,
        color: PALETTE[k % PALETTE.length]}))});
    }
  }
}

let DATA = null;
try {
  DATA = JSON.parse(document.getElementById('report-data').textContent);
  document.title = 'Tally report: ' + DATA.run_dir;
  document.getElementById('title').textContent = 'Tally report: ' + DATA.run_dir;
  document.getElementById('subtitle').textContent = DATA.summary.rows.filter(r => r[0] === 'nodes' ||
    r[0] === 'run length').map(r => r[1]).join('; ');
} catch (e) {
  fail('data', e);
}
if (DATA) {
  for (const [id, draw] of [['summary', summary], ['findings', findings], ['steps', steps],
                            ['training', training], ['servers', servers], ['system', system]]) {
    try {
      draw(document.getElementById(id));
    } catch (e) {
      fail(id, e);
    }
  }
}
document.body.dataset.charts = String(charts);
})();
</script>
</body>
</html>
)PAGE";

}  // namespace tally
