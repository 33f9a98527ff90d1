// timeline.js draws a turn's timeline from the JSON of cli.Timeline, or a
// workflow's from cli.WorkflowTimeline: one band per task, holding that
// task's turn drawn step by step exactly as a turn's page draws it. The page
// of `jetloop replay --html` inlines it and carries its turn or workflow in
// #timeline-data; `jetloop ui` serves it as a file and calls
// jetloopTimeline(tl, opts) itself, then update(tl) as the events arrive.
// Both pages hold the same elements (#timeline, #tooltip, the toolbar's).
// opts.taskHref(task), when given, links each task's band to its turn;
// opts.turnHref(turnID), a subagent's band to its turn and a subagent's
// page back to its parent. A subagent call's child turn (tl's tools'
// child) is drawn as a band under the call, on the same axis.
"use strict";
var jetloopTimeline = (function () {
function mount(tl, opts) {
  opts = opts || {};
  var root = document.getElementById("timeline");
  var tip = document.getElementById("tooltip");
  var note = document.getElementById("zoom-note");
  var reset = document.getElementById("zoom-reset");
  var full = [0, Math.max(tl.end_ms, 0.05)];
  var domain = full.slice();
  var tips = new WeakMap();
  // A workflow's timeline has tasks; each task's turn is drawn with the
  // same rows as a turn's, their ids prefixed by the task ("task-2-step-1").
  function isWorkflow() { return !!tl.tasks; }
  function turns() {
    var top = !isWorkflow() ? [{ turn: tl, key: "", task: null, depth: 0 }] :
      tl.tasks.filter(function (k) { return !!k.turn; }).map(function (k) {
        return { turn: k.turn, key: "task-" + k.task + "-", task: k, depth: 0 };
      });
    var out = [];
    top.forEach(function (c) { out.push(c); out.push.apply(out, descendants(c)); });
    return out;
  }
  // childOf is the drawing context of call k's child turn, under c's turn:
  // its ids start with child-<turn id>-, so a call id that two turns share
  // names two bars.
  function childOf(c, k) {
    return { turn: k.child, key: "child-" + k.child_turn_id + "-", task: c.task, depth: c.depth + 1, call: k };
  }
  function descendants(c) {
    var out = [];
    c.turn.steps.forEach(function (s) {
      s.tools.forEach(function (k) {
        if (!k.child) return;
        var d = childOf(c, k);
        out.push(d);
        out.push.apply(out, descendants(d));
      });
    });
    return out;
  }
  // pauses lists every span in which something waited for a person: a
  // turn's pauses, and a workflow's gate waits.
  function pauses() {
    var out = [];
    if (isWorkflow()) tl.waits.forEach(function (w) { out.push({ p: w, wait: true }); });
    turns().forEach(function (c) { c.turn.pauses.forEach(function (p) { out.push({ p: p, c: c }); }); });
    return out;
  }

  // el builds an element; text only ever goes in through textContent, so no
  // string from the log is parsed as HTML.
  function el(tag, cls, attrs, text) {
    var n = document.createElement(tag);
    if (cls) n.className = cls;
    for (var k in attrs || {}) n.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  }
  function ms(v) {
    if (v === 0) return "0ms";
    if (v < 1) return Math.round(v * 1000) + "µs";
    if (v < 10) return v.toFixed(1) + "ms";
    if (v < 1000) return Math.round(v) + "ms";
    if (v < 60000) return (v / 1000).toFixed(v < 10000 ? 2 : 1) + "s";
    return Math.floor(v / 60000) + "m" + Math.round((v % 60000) / 1000) + "s";
  }

  // Long pauses (a person answering, an approval) would squeeze the steps
  // into slivers: on the whole-turn view, each pause longer than a fifth of
  // the turn is drawn at a small fixed width with its real length on it.
  var BREAK_SHARE = 0.06;
  var longPauses = findLongPauses();
  function findLongPauses() {
    var out = [];
    pauses().map(function (x) { return [x.p.start_ms, x.p.end_ms]; })
      .sort(function (a, b) { return a[0] - b[0]; })
      .forEach(function (p) {
        var last = out[out.length - 1];
        if (last && p[0] <= last[1]) last[1] = Math.max(last[1], p[1]); else out.push(p.slice());
      });
    return out.filter(function (b) { return b[1] - b[0] > (full[1] - full[0]) / 5; });
  }
  var compress = longPauses.length > 0;
  var breaks = [], breakW = 0;
  function setScale() {
    var whole = domain[0] === full[0] && domain[1] === full[1];
    breaks = compress && whole ? longPauses : [];
    var cut = breaks.reduce(function (a, b) { return a + b[1] - b[0]; }, 0);
    breakW = BREAK_SHARE * (domain[1] - domain[0] - cut) / (1 - breaks.length * BREAK_SHARE);
  }
  // virt maps a time to the drawn axis: linear, except inside breaks.
  function virt(v) {
    var x = v - domain[0];
    breaks.forEach(function (b) {
      var len = b[1] - b[0];
      if (v >= b[1]) x -= len - breakW;
      else if (v > b[0]) x -= (v - b[0]) * (1 - breakW / len);
    });
    return x;
  }
  // A little room after the end keeps the last marker in view.
  function pct(v) { return virt(v) / (virt(domain[1]) * 1.025) * 100; }
  // tickLabel writes a tick's time with as many digits as the ticks' spacing
  // needs, so +2.143s and +2.145s stay apart.
  var tickStep = 1;
  function tickLabel(t) {
    if (t === 0) return "0";
    if (t < 1000 || tickStep >= 1000) return "+" + ms(t);
    return "+" + (t / 1000).toFixed(Math.min(6, Math.max(0, Math.ceil(-Math.log10(tickStep / 1000) - 1e-9)))) + "s";
  }
  // ticks returns round times to mark, none inside a break.
  function ticks() {
    var raw = virt(domain[1]) / 6 || 1, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * mag; }).find(function (s) { return s >= raw; });
    tickStep = step;
    var segs = [], from = domain[0], out = [];
    breaks.forEach(function (b) { segs.push([from, b[0]]); from = b[1]; });
    segs.push([from, domain[1]]);
    segs.forEach(function (sg) {
      for (var t = Math.ceil(sg[0] / step - 1e-9) * step; t <= sg[1] + 1e-9; t += step) out.push(t);
    });
    return out;
  }
  function place(n, a, b) {
    n.style.left = pct(a) + "%";
    n.style.width = Math.max(0, pct(b) - pct(a)) + "%";
  }
  // label puts a bar's caption after its end, or before its start when the
  // bar ends near the right edge.
  function label(lane, a, b, parts) {
    var pa = Math.max(pct(a), 0), pb = pct(b), where = pb <= 72 ? "" : pa >= 28 ? " left" : " inside";
    var l = el("span", "bar-label" + where);
    l.style.left = (where === "" ? pb : where === " left" ? pa : pa + 0.3) + "%";
    parts.forEach(function (p) {
      l.appendChild(typeof p === "string" ? document.createTextNode(p) : p);
    });
    lane.appendChild(l);
  }
  function tipFor(n, build) {
    tips.set(n, build);
    if (!n.hasAttribute("tabindex")) n.setAttribute("tabindex", "0");
  }
  function dl(pairs) {
    var d = el("dl");
    pairs.forEach(function (p) {
      if (p[1] === undefined || p[1] === null || p[1] === "") return;
      d.appendChild(el("dt", "", {}, p[0]));
      d.appendChild(el("dd", "", {}, p[1]));
    });
    return d;
  }
  function pre(text) { return el("pre", "", {}, text); }
  function tokens(u) { return u ? u.input_tokens + " in / " + u.output_tokens + " out" : ""; }
  // span is a bar's length; running says whether its turn (or workflow) is
  // still under way, which an open bar then is too.
  function span(a, b, open, running) { return ms(b - a) + (open ? (running ? " so far (running)" : " (cut short)") : ""); }

  function axis() {
    var row = el("div", "row axis");
    row.appendChild(el("div", "label", {}, "+time"));
    var plot = el("div", "plot");
    var lastLabel = -100;
    ticks().forEach(function (t) {
      var tick = el("div", "tick"), at = pct(t);
      tick.style.left = at + "%";
      // After a break, ticks of both sides may crowd: label only those apart.
      if (at < 94 && at - lastLabel > 7) {
        tick.appendChild(el("span", "", {}, tickLabel(t)));
        lastLabel = at;
      }
      plot.appendChild(tick);
    });
    breaks.forEach(function (b) {
      var n = el("div", "axis-break");
      place(n, b[0], b[1]);
      n.appendChild(el("span", "", {}, "≈ " + ms(b[1] - b[0])));
      plot.appendChild(n);
    });
    row.appendChild(plot);
    return row;
  }
  function grid(plot) {
    ticks().forEach(function (t) {
      var g = el("div", "grid");
      g.style.left = pct(t) + "%";
      plot.appendChild(g);
    });
  }

  // stepRow draws step s of turn t; c.key prefixes its ids and c.task, in a
  // workflow, is the task whose band holds it.
  function stepRow(s, c) {
    var t = c.turn, key = c.key, task = c.task ? c.task.task : null, nested = c.depth > 0;
    var what = (task ? "task " + task + " " : "") + "step " + s.step;
    var row = el("div", "row step", { id: key + "step-" + s.step, "data-step": s.step });
    if (task) row.setAttribute("data-task", task);
    if (c.depth) row.setAttribute("data-turn", t.turn_id);
    if (s.decision) row.setAttribute("data-decision", s.decision);
    if (s.stop_reason) row.setAttribute("data-stop-reason", s.stop_reason);
    var lab = el("div", "label");
    indent(lab, c);
    var name = el("button", "name", { type: "button", title: "zoom to " + what }, "Step " + s.step);
    name.addEventListener("click", function () { zoom(s.start_ms, s.end_ms, what); });
    lab.appendChild(name);
    var sub = s.open ? (t.running ? "running" : "cut short") : s.decision === "stop" ? "stop: " + s.stop_reason : "continue";
    lab.appendChild(el("span", "sub" + (s.decision === "stop" ? " stop stop-" + s.stop_reason : ""), {}, sub));
    lab.appendChild(el("span", "sub", {}, ms(s.end_ms - s.start_ms)));
    row.appendChild(lab);

    var plot = el("div", "plot");
    grid(plot);
    var band = el("div", "step-span");
    place(band, s.start_ms, s.end_ms);
    plot.appendChild(band);

    var m = s.model;
    var lane = el("div", "lane model-lane");
    var bar = el("div", "bar model-bar" + (m.error ? " error" : "") + (m.open ? " open" : ""),
      { id: key + "model-" + s.step, "data-step": s.step, "aria-label": "model call of " + what });
    if (task) bar.setAttribute("data-task", task);
    place(bar, m.start_ms, m.end_ms);
    tipFor(bar, function () {
      var f = document.createDocumentFragment();
      f.appendChild(el("div", "t", {}, "model call · " + what));
      f.appendChild(dl([
        ["time", span(m.start_ms, m.end_ms, m.open, t.running)],
        ["provider", m.open ? "" : m.duration_ms + " ms"],
        ["tokens", m.open ? "" : tokens(m.usage)],
        ["finish", m.finish_reason],
        ["attempts", m.attempts],
        ["tool calls", m.tool_calls ? m.tool_calls.map(function (c) {
          // A call the turn stopped before running (doom loop, budget) has no bar.
          return c.name + (s.tools.some(function (t) { return t.call_id === c.call_id; }) ? "" : " (not run)");
        }).join(", ") : (m.open ? "" : "none")],
        ["error", m.error]
      ]));
      if (m.text) f.appendChild(pre(m.text));
      return f;
    });
    lane.appendChild(bar);
    var cap = [m.open ? (t.running ? "model call (running)" : "model call (cut short)") : "model " + ms(m.end_ms - m.start_ms)];
    if (!m.open) cap.push(el("span", "dim", {}, " · " + m.usage.input_tokens + "→" + m.usage.output_tokens + " tok · " +
      (m.tool_calls ? m.tool_calls.length : 0) + " call(s)"));
    if (m.error) cap.push(el("span", "err", {}, " · " + m.error));
    label(lane, m.start_ms, m.end_ms, cap);
    plot.appendChild(lane);

    s.tools.forEach(function (c) {
      var lane = el("div", "lane tool-lane", { "data-lane": c.lane });
      var bar = el("div", "bar tool-bar" + (c.is_error ? " error" : "") + (c.final ? " final" : "") + (c.open ? " open" : "") +
        (c.child_turn_id ? " subagent-bar" : ""),
        { id: (nested ? key : "") + "call-" + c.call_id, "data-call-id": c.call_id, "data-step": s.step, "data-tool": c.name,
          "aria-label": c.name + " " + c.call_id });
      if (c.child_turn_id) bar.setAttribute("data-child-turn", c.child_turn_id);
      if (task) bar.setAttribute("data-task", task);
      place(bar, c.start_ms, c.end_ms);
      tipFor(bar, function () {
        var f = document.createDocumentFragment();
        f.appendChild(el("div", "t", {}, c.name + (c.is_error ? " · error" : "") + (c.final ? " · final" : "")));
        f.appendChild(dl([
          ["call", c.call_id],
          ["time", span(c.start_ms, c.end_ms, c.open, t.running)],
          ["worker time", c.open ? "" : c.duration_ms + " ms"],
          ["worker", c.worker],
          ["attempts", c.attempts],
          ["subagent turn", c.child_turn_id]
        ]));
        f.appendChild(el("div", "", {}, "arguments"));
        f.appendChild(pre(c.arguments || "{}"));
        if (!c.open) {
          f.appendChild(el("div", "", {}, "output"));
          f.appendChild(pre(c.output || "(empty)"));
        }
        return f;
      });
      lane.appendChild(bar);
      var cap = [c.name + " "];
      cap.push(el("span", c.is_error ? "err" : "dim", {}, c.open ? (t.running ? "running" : "cut short") :
        (c.is_error ? "error " : "") + ms(c.end_ms - c.start_ms)));
      label(lane, c.start_ms, c.end_ms, cap);
      plot.appendChild(lane);
    });
    row.appendChild(plot);
    return row;
  }

  function summaryRow(sm, c) {
    var t = c.turn;
    var row = el("div", "row summary", { id: c.key + "summary", "data-step": sm.step });
    if (c.task) row.setAttribute("data-task", c.task.task);
    var lab = el("div", "label");
    indent(lab, c);
    lab.appendChild(el("span", "name", {}, "Summary"));
    lab.appendChild(el("span", "sub", {}, "not a step"));
    lab.appendChild(el("span", "sub", {}, ms(sm.end_ms - sm.start_ms)));
    row.appendChild(lab);
    var plot = el("div", "plot");
    grid(plot);
    var lane = el("div", "lane");
    var bar = el("div", "bar summary-bar" + (sm.open ? " open" : ""), { "data-step": sm.step, "aria-label": "summary call" });
    place(bar, sm.start_ms, sm.end_ms);
    tipFor(bar, function () {
      var f = document.createDocumentFragment();
      f.appendChild(el("div", "t", {}, "summary call (no tools)"));
      f.appendChild(dl([["time", span(sm.start_ms, sm.end_ms, sm.open, t.running)], ["tokens", tokens(sm.usage)]]));
      if (t.sentinel) f.appendChild(pre(t.sentinel.text));
      return f;
    });
    lane.appendChild(bar);
    label(lane, sm.start_ms, sm.end_ms, ["summary " + (sm.open ? "(running)" : ms(sm.end_ms - sm.start_ms))]);
    plot.appendChild(lane);
    row.appendChild(plot);
    return row;
  }

  // markLabel captions a pause or a marker in the chart's bottom row: from the
  // span's start, or ending at its end when that is near the right edge.
  var marks;
  function markLabel(o, a, b, cls, text) {
    var left = pct(a) > 60;
    var l = el("span", "mark-label " + cls + (left ? " left" : ""), {}, text);
    l.style.left = (left ? pct(b) : pct(a)) + "%";
    marks.appendChild(l);
  }
  function marksRow() {
    var row = el("div", "row marks");
    row.appendChild(el("div", "label", {}, ""));
    var plot = marks = el("div", "plot");
    grid(plot);
    row.appendChild(plot);
    return row;
  }

  function overlay() {
    var o = el("div", "overlay");
    function compressed(p) { return breaks.some(function (b) { return p.start_ms >= b[0] && p.end_ms <= b[1]; }) ? " compressed" : ""; }
    pauses().forEach(function (x) {
      var p = x.p;
      if (x.wait) {
        // The gate waiting for a person between two tasks.
        var w = el("div", "pause gate-wait" + compressed(p), { id: "wait-" + p.task, "data-kind": "gate", "data-task": p.task });
        place(w, p.start_ms, p.end_ms);
        markLabel(o, p.start_ms, p.end_ms, "pause-label", "waiting for approval of task " + p.task + " · " + ms(p.end_ms - p.start_ms));
        tipFor(w, function () {
          var f = document.createDocumentFragment();
          f.appendChild(el("div", "t", {}, "the gate waits for a person before task " + p.task));
          f.appendChild(dl([
            ["time", span(p.start_ms, p.end_ms, p.open, tl.running)],
            ["reason", p.reason],
            ["approved", p.approved === undefined || p.approved === null ? "" : String(p.approved)],
            ["note", p.note]
          ]));
          return f;
        });
        o.appendChild(w);
        return;
      }
      var task = x.c.task ? x.c.task.task : null;
      var n = el("div", "pause" + compressed(p), { "data-call-id": p.call_id, "data-kind": p.kind, "data-step": p.step });
      if (task) n.setAttribute("data-task", task);
      place(n, p.start_ms, p.end_ms);
      markLabel(o, p.start_ms, p.end_ms, "pause-label", "paused: " + (p.kind === "approval" ? "approval of " + p.tool : "reply") +
        " · " + ms(p.end_ms - p.start_ms));
      tipFor(n, function () {
        var f = document.createDocumentFragment();
        f.appendChild(el("div", "t", {}, p.kind === "approval" ? "waiting for approval of " + p.tool : "waiting for a reply"));
        f.appendChild(dl([
          ["task", task],
          ["call", p.call_id],
          ["time", span(p.start_ms, p.end_ms, p.open, x.c.turn.running)],
          ["answer", p.answer],
          ["approved", p.approved === undefined || p.approved === null ? "" : String(p.approved)],
          ["note", p.note]
        ]));
        if (p.question) f.appendChild(pre(p.question));
        return f;
      });
      o.appendChild(n);
    });
    turns().forEach(function (c) {
      var sen = c.turn.sentinel;
      if (!sen) return;
      var sn = el("div", "marker sentinel-marker", { id: c.key + "sentinel", "data-kind": sen.kind, "data-reason": sen.reason });
      if (c.task) sn.setAttribute("data-task", c.task.task);
      sn.style.left = pct(sen.at_ms) + "%";
      markLabel(o, sen.at_ms, sen.at_ms, "sentinel-label", "sentinel: " + sen.reason);
      tipFor(sn, function () {
        var f = document.createDocumentFragment();
        f.appendChild(el("div", "t", {}, "turn.sentinel · " + sen.kind + (c.task ? " · task " + c.task.task : "")));
        f.appendChild(pre(sen.text));
        return f;
      });
      o.appendChild(sn);
    });
    turns().forEach(function (c) {
      (c.turn.compactions || []).forEach(function (cp) {
        var n = el("div", "marker compaction-marker" + (cp.error ? " error" : ""),
          { id: c.key + "compaction-" + cp.through_step, "data-through-step": cp.through_step, "data-child-turn": cp.child_turn_id });
        if (c.task) n.setAttribute("data-task", c.task.task);
        n.style.left = pct(cp.at_ms) + "%";
        markLabel(o, cp.at_ms, cp.at_ms, "compaction-label", (cp.error ? "not summarized: steps 1-" : "summarized: steps 1-") + cp.through_step);
        tipFor(n, function () {
          var f = document.createDocumentFragment();
          f.appendChild(el("div", "t", {}, "turn.compacted · steps 1-" + cp.through_step));
          f.appendChild(dl([["turn", cp.child_turn_id], ["error", cp.error]]));
          if (cp.summary) f.appendChild(pre(cp.summary));
          return f;
        });
        o.appendChild(n);
      });
    });
    var fin = tl.finished;
    var mk = el("div", fin ? "marker finish-marker stop-" + fin.stop_reason : "marker now-marker",
      fin ? { id: "finish", "data-stop-reason": fin.stop_reason } : { id: "now" });
    mk.style.left = pct(fin ? fin.at_ms : tl.end_ms) + "%";
    markLabel(o, fin ? fin.at_ms : tl.end_ms, fin ? fin.at_ms : tl.end_ms,
      "finish-label" + (fin ? " stop-" + fin.stop_reason : " running"), fin ? "stopped: " + fin.stop_reason : "running");
    tipFor(mk, function () {
      var f = document.createDocumentFragment();
      if (!fin) {
        f.appendChild(el("div", "t", {}, "still running at +" + ms(tl.end_ms)));
        return f;
      }
      var mt = fin.metrics;
      if (isWorkflow()) {
        f.appendChild(el("div", "t", {}, "workflow.finished · " + fin.stop_reason));
        f.appendChild(dl([
          ["at", "+" + ms(fin.at_ms)],
          ["tasks", mt.tasks], ["steps", mt.steps], ["tool calls", mt.tool_calls], ["model calls", mt.model_calls],
          ["tokens", mt.input_tokens + " in / " + mt.output_tokens + " out"], ["in turns", mt.duration_ms + " ms"], ["error", fin.error]
        ]));
      } else {
        f.appendChild(el("div", "t", {}, "turn.finished · " + fin.stop_reason));
        f.appendChild(dl([
          ["at", "+" + ms(fin.at_ms)],
          ["steps", mt.steps], ["tool calls", mt.tool_calls], ["model calls", mt.model_calls],
          ["tokens", mt.input_tokens + " in / " + mt.output_tokens + " out"], ["error", fin.error]
        ]));
      }
      if (fin.output) f.appendChild(pre(fin.output));
      return f;
    });
    o.appendChild(mk);
    return o;
  }

  function emptyRow(text) {
    var row = el("div", "row");
    row.appendChild(el("div", "label", {}, text));
    var plot = el("div", "plot lane");
    grid(plot);
    row.appendChild(plot);
    return row;
  }

  // turnRows draws a turn's steps and its summary call, as rows of parent,
  // each step followed by the bands of the subagents its calls ran.
  function turnRows(parent, c) {
    c.turn.steps.forEach(function (s) {
      parent.appendChild(stepRow(s, c));
      s.tools.forEach(function (k) { if (k.child_turn_id) parent.appendChild(childBand(c, k, s)); });
    });
    if (c.turn.summary) parent.appendChild(summaryRow(c.turn.summary, c));
  }

  // indent shifts a label right by its turn's depth of subagent calls.
  function indent(lab, c) {
    if (c.depth) lab.style.paddingLeft = (0.6 + 1.1 * c.depth) + "rem";
  }
  function turnLink(id, cls) {
    return opts.turnHref ? el("a", "sub turn-link" + (cls ? " " + cls : ""), { href: opts.turnHref(id) }, id) : el("span", "sub", {}, id);
  }

  // childBand draws the child turn of subagent call k (of step s of c's
  // turn) as a band: a head row with a bar from the call to its result,
  // then the child's own rows, one level deeper.
  function childBand(c, k, s) {
    var ch = k.child, fin = ch && ch.finished, open = k.open || (ch && ch.running);
    var band = el("div", "child-band" + (open ? " open" : fin && !good(fin.stop_reason) || k.is_error ? " failed" : ""),
      { id: "child-" + k.child_turn_id, "data-turn": k.child_turn_id, "data-parent-turn": c.turn.turn_id,
        "data-call-id": k.call_id, "data-step": s.step, "data-depth": c.depth + 1 });
    if (c.task) band.setAttribute("data-task", c.task.task);
    var d = ch ? childOf(c, k) : { turn: null, key: "child-" + k.child_turn_id + "-", task: c.task, depth: c.depth + 1, call: k };
    var agent = ch && ch.agent ? ch.agent : k.name;
    var row = el("div", "row child-head", { "data-turn": k.child_turn_id });
    var lab = el("div", "label");
    indent(lab, d);
    var name = el("button", "name", { type: "button", title: "zoom to subagent " + agent }, "↳ " + agent);
    name.addEventListener("click", function () { zoom(k.start_ms, k.end_ms, "subagent " + agent); });
    lab.appendChild(name);
    lab.appendChild(turnLink(k.child_turn_id));
    var status = fin ? "stop: " + fin.stop_reason : open ? (tl.running ? "running" : "cut short") : k.is_error ? "error" : "";
    lab.appendChild(el("span", "sub" + (fin ? " stop stop-" + fin.stop_reason : ""), {}, status));
    row.appendChild(lab);
    var plot = el("div", "plot");
    grid(plot);
    var lane = el("div", "lane child-lane");
    var bar = el("div", "bar child-bar" + (open ? " open" : "") + (k.is_error ? " error" : ""),
      { id: "child-bar-" + k.child_turn_id, "data-turn": k.child_turn_id, "data-call-id": k.call_id,
        "aria-label": "subagent " + agent + " " + k.child_turn_id });
    place(bar, k.start_ms, k.end_ms);
    var mt = fin ? fin.metrics : null;
    tipFor(bar, function () {
      var f = document.createDocumentFragment();
      f.appendChild(el("div", "t", {}, "subagent " + agent + " · " + (fin ? fin.stop_reason : open ? "running" : "")));
      f.appendChild(dl([
        ["turn", k.child_turn_id],
        ["call", k.call_id + " of " + c.turn.turn_id],
        ["time", span(k.start_ms, k.end_ms, open, tl.running)],
        ["steps", mt ? mt.steps : ""], ["tool calls", mt ? mt.tool_calls : ""], ["model calls", mt ? mt.model_calls : ""],
        ["tokens", mt ? mt.input_tokens + " in / " + mt.output_tokens + " out" : ""],
        ["error", fin ? fin.error : ""], ["log", k.child_missing]
      ]));
      if (ch && ch.input) f.appendChild(pre(ch.input));
      if (k.output) {
        f.appendChild(el("div", "", {}, "result"));
        f.appendChild(pre(k.output));
      }
      return f;
    });
    lane.appendChild(bar);
    var task = ch && ch.input ? ch.input.split("\n")[0] : "";
    var cap = [agent + (task ? ": " + (task.length > 48 ? task.slice(0, 47) + "…" : task) : "") + " "];
    cap.push(el("span", fin && !good(fin.stop_reason) ? "err" : "dim", {}, open ? "· running" :
      "· " + (fin ? fin.stop_reason + " · " : "") + ms(k.end_ms - k.start_ms) +
      (mt ? " · " + count(mt.steps, "step") + " · " + count(mt.tool_calls, "tool call") : "")));
    label(lane, k.start_ms, k.end_ms, cap);
    plot.appendChild(lane);
    row.appendChild(plot);
    band.appendChild(row);
    if (ch) turnRows(band, d);
    if (!ch || (!ch.steps.length && !ch.summary)) {
      var empty = emptyRow(k.child_missing ? "no log" : "no steps");
      indent(empty.firstChild, d);
      band.appendChild(empty);
    }
    return band;
  }

  function count(n, what) { return n + " " + what + (n === 1 ? "" : "s"); }
  function good(reason) { return reason === "completed" || reason === "synthesis_done"; }

  // workflowRow draws the workflow's own events as marks on one lane:
  // started, each checkpoint, each gate decision, a resume, the finish.
  function workflowRow() {
    var row = el("div", "row workflow-row", { id: "workflow" });
    var lab = el("div", "label");
    lab.appendChild(el("span", "name", {}, "Workflow"));
    lab.appendChild(el("span", "sub", {}, tl.finished ? "stopped: " + tl.finished.stop_reason : tl.phase));
    lab.appendChild(el("span", "sub", {}, tl.tasks.length + " of " + tl.task_count + " tasks"));
    row.appendChild(lab);
    var plot = el("div", "plot");
    grid(plot);
    var lane = el("div", "lane");
    tl.marks.forEach(function (m) {
      var kind = m.type.split(".").pop();
      var cls = "wf-mark mark-" + kind + (m.decision ? " gate-" + m.decision : "") +
        (m.type === "workflow.finished" && tl.finished ? " stop-" + tl.finished.stop_reason : "");
      var n = el("div", cls, { id: "mark-" + m.seq, "data-type": m.type, "data-task": m.task, "aria-label": m.type });
      if (m.decision) n.setAttribute("data-decision", m.decision);
      if (m.by) n.setAttribute("data-by", m.by);
      n.style.left = pct(m.at_ms) + "%";
      tipFor(n, function () {
        var f = document.createDocumentFragment();
        f.appendChild(el("div", "t", {}, m.type + (m.decision ? " · " + m.decision : "") + (m.by ? " by " + m.by : "")));
        f.appendChild(dl([["at", "+" + ms(m.at_ms)], ["seq", m.seq], ["task", m.task || ""]]));
        if (m.text) f.appendChild(pre(m.text));
        return f;
      });
      lane.appendChild(n);
    });
    plot.appendChild(lane);
    row.appendChild(plot);
    return row;
  }

  // taskBand draws task k as a band: a head row with the task's bar (its
  // prompt, stop reason and metrics), then its turn's rows.
  function taskBand(k) {
    var band = el("div", "task-band" + (k.open ? " open" : good(k.stop_reason) ? "" : " failed"),
      { id: "task-" + k.task, "data-task": k.task, "data-turn": k.turn_id });
    if (k.stop_reason) band.setAttribute("data-stop-reason", k.stop_reason);
    var row = el("div", "row task-head", { "data-task": k.task });
    var lab = el("div", "label");
    var name = el("button", "name", { type: "button", title: "zoom to task " + k.task }, "Task " + k.task);
    name.addEventListener("click", function () { zoom(k.start_ms, k.end_ms, "task " + k.task); });
    lab.appendChild(name);
    if (opts.taskHref) lab.appendChild(el("a", "sub turn-link", { href: opts.taskHref(k) }, k.turn_id));
    else lab.appendChild(el("span", "sub", {}, k.turn_id));
    var status = k.open ? (tl.running ? "running" : "cut short") : "stop: " + k.stop_reason;
    lab.appendChild(el("span", "sub" + (k.open ? "" : " stop stop-" + k.stop_reason), {}, status));
    row.appendChild(lab);
    var plot = el("div", "plot");
    grid(plot);
    var lane = el("div", "lane task-lane");
    var bar = el("div", "bar task-bar" + (k.open ? " open" : good(k.stop_reason) ? "" : " error"),
      { id: "task-bar-" + k.task, "data-task": k.task, "aria-label": "task " + k.task });
    place(bar, k.start_ms, k.end_ms);
    var mt = k.metrics;
    tipFor(bar, function () {
      var f = document.createDocumentFragment();
      f.appendChild(el("div", "t", {}, "task " + k.task + " · " + (k.open ? "running" : k.stop_reason)));
      f.appendChild(dl([
        ["turn", k.turn_id],
        ["agent", k.agent],
        ["time", span(k.start_ms, k.end_ms, k.open, tl.running)],
        ["steps", mt ? mt.steps : ""], ["tool calls", mt ? mt.tool_calls : ""], ["model calls", mt ? mt.model_calls : ""],
        ["tokens", mt ? mt.input_tokens + " in / " + mt.output_tokens + " out" : ""],
        ["error", k.error], ["log", k.missing]
      ]));
      if (k.input) f.appendChild(pre(k.input));
      if (k.output) {
        f.appendChild(el("div", "", {}, "output"));
        f.appendChild(pre(k.output));
      }
      return f;
    });
    lane.appendChild(bar);
    var prompt = (k.input || "").split("\n")[0];
    var cap = [(k.agent ? k.agent + ": " : "") + (prompt.length > 48 ? prompt.slice(0, 47) + "…" : prompt) + " "];
    cap.push(el("span", k.open ? "dim" : good(k.stop_reason) ? "dim" : "err", {}, k.open ? (tl.running ? "· running" : "· cut short") :
      "· " + k.stop_reason + " · " + ms(k.end_ms - k.start_ms) +
      (mt ? " · " + count(mt.steps, "step") + " · " + count(mt.tool_calls, "tool call") + " · " + mt.input_tokens + "→" + mt.output_tokens + " tok" : "")));
    label(lane, k.start_ms, k.end_ms, cap);
    plot.appendChild(lane);
    row.appendChild(plot);
    band.appendChild(row);
    if (k.turn) turnRows(band, { turn: k.turn, key: "task-" + k.task + "-", task: k });
    if (!k.turn || (!k.turn.steps.length && !k.turn.summary)) band.appendChild(emptyRow(k.missing ? "no log" : "no steps"));
    return band;
  }

  function render() {
    setScale();
    root.textContent = "";
    root.appendChild(axis());
    var steps = 0;
    if (isWorkflow()) {
      root.appendChild(workflowRow());
      tl.tasks.forEach(function (k) {
        root.appendChild(taskBand(k));
        if (k.turn) steps += k.turn.steps.length;
      });
      if (!tl.tasks.length) root.appendChild(emptyRow("no tasks"));
      root.setAttribute("data-tasks", tl.tasks.length);
    } else {
      turnRows(root, turns()[0]);
      if (!tl.steps.length && !tl.summary) root.appendChild(emptyRow("no steps"));
      steps = tl.steps.length;
    }
    root.appendChild(marksRow());
    root.appendChild(overlay());
    root.setAttribute("data-steps", steps);
    root.setAttribute("data-rendered", "true");
  }
  function zoom(a, b, what) {
    var pad = Math.max((b - a) * 0.08, 0.05);
    domain = [Math.max(0, a - pad), Math.min(full[1], b + pad)];
    if (domain[1] - domain[0] < 0.1) domain[1] = domain[0] + 0.1;
    note.textContent = "showing " + what + ": +" + ms(domain[0]) + " to +" + ms(domain[1]);
    reset.hidden = false;
    render();
  }
  var box = document.getElementById("compress-box");
  document.getElementById("compress").hidden = longPauses.length === 0;
  box.addEventListener("change", function () { compress = box.checked; render(); });
  reset.addEventListener("click", function () {
    domain = full.slice();
    note.textContent = "";
    reset.hidden = true;
    render();
  });
  document.addEventListener("keydown", function (e) { if (e.key === "Escape" && !reset.hidden) reset.click(); });

  var shownID = "";
  function show(n, x, y) {
    var build = tips.get(n);
    if (!build) return;
    shownID = n.id;
    tip.textContent = "";
    tip.appendChild(build());
    tip.hidden = false;
    var r = tip.getBoundingClientRect();
    var left = Math.min(x + 14, window.innerWidth - r.width - 8);
    var top = y + 16 + r.height > window.innerHeight ? y - r.height - 12 : y + 16;
    tip.style.left = Math.max(8, left) + "px";
    tip.style.top = Math.max(8, top) + "px";
  }
  function target(e) {
    for (var n = e.target; n && n !== document; n = n.parentNode) if (tips.has(n)) return n;
    return null;
  }
  root.addEventListener("mousemove", function (e) {
    var n = target(e);
    if (n) show(n, e.clientX, e.clientY); else tip.hidden = true;
  });
  root.addEventListener("mouseleave", function () { tip.hidden = true; });
  root.addEventListener("focusin", function (e) {
    var n = target(e);
    if (!n) return;
    var r = n.getBoundingClientRect();
    show(n, r.left, r.bottom);
  });
  root.addEventListener("focusout", function () { tip.hidden = true; });

  render();

  // update redraws the chart from a newer timeline of the same turn, keeping
  // a zoom the reader chose.
  function update(next) {
    var zoomed = !reset.hidden, hadLong = longPauses.length > 0;
    var shown = tip.hidden ? "" : shownID;
    tl = next;
    full = [0, Math.max(tl.end_ms, 0.05)];
    if (!zoomed) domain = full.slice();
    longPauses = findLongPauses();
    if (!hadLong && longPauses.length) compress = box.checked;
    document.getElementById("compress").hidden = longPauses.length === 0;
    render();
    // Details shown stay shown, with what the new drawing says, while
    // their bar is still there.
    var n = shown && document.getElementById(shown);
    if (n && tips.has(n)) {
      tip.textContent = "";
      tip.appendChild(tips.get(n)());
    } else {
      tip.hidden = true;
    }
  }

  // A link to a bar (page.html#call-ID, #model-3, #finish) opens with that
  // bar's details shown; a link to a step (#step-3, #task-2-step-1) or to a
  // task (#task-2) zoomed to it.
  var linkID = decodeURIComponent(location.hash.slice(1));
  turns().forEach(function (c) {
    c.turn.steps.forEach(function (s) {
      if (c.key + "step-" + s.step === linkID) zoom(s.start_ms, s.end_ms, (c.task ? "task " + c.task.task + " " : "") + "step " + s.step);
    });
  });
  if (isWorkflow()) {
    tl.tasks.forEach(function (k) { if ("task-" + k.task === linkID) zoom(k.start_ms, k.end_ms, "task " + k.task); });
  }
  var linked = linkID && document.getElementById(linkID);
  if (linked && tips.has(linked)) {
    // Scroll the window only: the chart's boxes clip and must not scroll.
    window.scrollTo(0, Math.max(0, linked.getBoundingClientRect().top + window.scrollY - window.innerHeight / 4));
    linked.focus({ preventScroll: true });
    var r = linked.getBoundingClientRect();
    show(linked, r.left, r.bottom);
  }
  return { update: update };
}

var data = document.getElementById("timeline-data");
if (data) mount(JSON.parse(data.textContent));
return mount;
})();
