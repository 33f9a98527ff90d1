// ui.js runs the pages of `jetloop ui`. What it shows comes from logs that
// models, tools and people wrote, so it enters the page only as text
// (textContent and attribute values), never as markup.
"use strict";
(function () {
  function $(id) { return document.getElementById(id); }
  function el(tag, cls, attrs, text) {
    var n = document.createElement(tag);
    if (cls) n.className = cls;
    for (var k in attrs || {}) n.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  }
  function td(text, cls) { return el("td", cls || "", {}, text); }
  function link(href, text) { return el("a", "", { href: href }, text); }
  function turnHref(id) { return "/turn/" + encodeURIComponent(id); }
  function workflowHref(id) { return "/workflow/" + encodeURIComponent(id); }
  function when(t) { return t ? new Date(t).toLocaleString() : "-"; }
  function clip(s, n) { s = String(s || ""); return s.length > n ? s.slice(0, n - 1) + "…" : s; }
  function show(node, on) { node.hidden = !on; }
  function since(ms) {
    if (ms < 1000) return "+" + ms + "ms";
    if (ms < 60000) return "+" + (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + "s";
    return "+" + Math.floor(ms / 60000) + "m" + Math.round((ms % 60000) / 1000) + "s";
  }

  var info = { can_control: false, can_retry: false };

  // post sends a control request. The custom header is what a page of
  // another site cannot add without the server's leave, which it never gives.
  function post(url, body) {
    return fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Jetloop-UI": "1" },
      body: JSON.stringify(body)
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (j) { return { ok: r.ok, status: r.status, body: j }; });
    }, function (err) { return { ok: false, status: 0, body: { error: String(err) } }; });
  }
  function say(node, text, bad) {
    node.textContent = text;
    node.className = "message" + (bad ? " bad" : "");
    node.hidden = false;
  }

  // live follows a stream of server-sent events; the browser reconnects on
  // its own, and the server then sends everything again.
  function live(url, handlers) {
    var src = new EventSource(url);
    var conn = $("conn");
    src.onopen = function () { conn.textContent = "live"; conn.className = "conn live"; };
    src.onerror = function () { conn.textContent = "reconnecting…"; conn.className = "conn down"; };
    Object.keys(handlers).forEach(function (k) {
      src.addEventListener(k, function (e) { handlers[k](JSON.parse(e.data)); });
    });
    src.addEventListener("failure", function (e) {
      conn.textContent = "stream failed: " + JSON.parse(e.data).error;
      conn.className = "conn down";
    });
    return src;
  }

  function statusText(r) {
    if (r.kind === "workflow" && r.workflow) {
      var w = r.workflow;
      if (r.status === "finished") return "finished: " + r.stop_reason + " · " + w.metrics.tasks + "/" + w.tasks + " tasks";
      if (r.status === "paused") return "paused: approve task " + (w.task + 1) + " · " + w.metrics.tasks + "/" + w.tasks + " done";
      return "running: task " + w.task + "/" + w.tasks;
    }
    if (r.kind !== "turn") return r.status + (r.last_type ? " (" + r.last_type + ")" : "");
    if (r.status === "finished") return "finished: " + r.stop_reason;
    if (r.status === "paused" && r.waiting) {
      return r.waiting.kind === "input" ? "paused: asks " + clip(r.waiting.question, 60) : "paused: approve " + r.waiting.tool;
    }
    return r.status;
  }
  function statusClass(r) {
    return "st " + (r.status === "finished" ? "stop-" + r.stop_reason : r.status);
  }

  // The turns page: one row per log, kept current by the server's stream. A
  // workflow's tasks' turns are listed under its row, in task order, and
  // its toggle hides them.
  function turnsPage() {
    var rows = new Map();
    var parents = new Map(); // a task's turn id: {wf, task}
    var collapsed = new Set();
    var tbody = document.querySelector("#turns tbody");
    var fs = $("f-status"), fa = $("f-agent"), fk = $("f-kind");
    var q = new URLSearchParams(location.search);
    function option(sel, value) {
      if (!value || Array.prototype.some.call(sel.options, function (o) { return o.value === value; })) return;
      sel.appendChild(el("option", "", { value: value }, value));
    }
    option(fa, q.get("agent"));
    option(fk, q.get("kind"));
    option(fs, q.get("status"));
    fs.value = q.get("status") || "";
    fa.value = q.get("agent") || "";
    fk.value = q.get("kind") || "";

    function matches(r) {
      return (!fs.value || r.status === fs.value || r.stop_reason === fs.value) &&
        (!fa.value || r.agent === fa.value) && (!fk.value || r.kind === fk.value);
    }
    function visible(r) {
      var p = parents.get(r.turn_id);
      return matches(r) && !(p && rows.has(p.wf) && collapsed.has(p.wf));
    }
    function draw(tr, r) {
      tr.textContent = "";
      tr.setAttribute("data-turn", r.turn_id);
      tr.setAttribute("data-status", r.status);
      tr.setAttribute("data-kind", r.kind);
      var first = el("td", "mono");
      var p = parents.get(r.turn_id);
      tr.classList.toggle("task-row", !!(p && rows.has(p.wf)));
      if (p && rows.has(p.wf)) {
        tr.setAttribute("data-workflow", p.wf);
        tr.setAttribute("data-task", p.task);
        first.appendChild(el("span", "nest", {}, "↳ task " + p.task + " "));
      } else {
        tr.removeAttribute("data-workflow");
        tr.removeAttribute("data-task");
      }
      if (r.workflow) {
        var open = !collapsed.has(r.turn_id);
        var toggle = el("button", "toggle", { type: "button", "aria-expanded": String(open),
          title: (open ? "hide" : "show") + " its tasks' turns" }, open ? "▾" : "▸");
        toggle.addEventListener("click", function () {
          if (collapsed.has(r.turn_id)) collapsed.delete(r.turn_id); else collapsed.add(r.turn_id);
          draw(tr, rows.get(r.turn_id));
          refilter();
        });
        first.appendChild(toggle);
        first.appendChild(document.createTextNode(" "));
        first.appendChild(link(workflowHref(r.turn_id), r.turn_id));
        tr.setAttribute("data-task", r.workflow.task);
        tr.setAttribute("data-tasks", r.workflow.tasks);
      } else {
        first.appendChild(link(turnHref(r.turn_id), r.turn_id));
      }
      tr.appendChild(first);
      tr.appendChild(td(r.session_id === r.turn_id ? "-" : r.session_id, "mono"));
      tr.appendChild(td(r.kind));
      tr.appendChild(td(r.agent || "-"));
      var st = td(statusText(r), statusClass(r));
      if (r.workflow) {
        var m = r.workflow.metrics;
        st.title = m.tasks + " tasks · " + m.steps + " steps · " + m.tool_calls + " tool calls · " + m.model_calls + " model calls · " +
          m.input_tokens + " tokens in / " + m.output_tokens + " out · " + m.duration_ms + " ms in turns";
      }
      tr.appendChild(st);
      tr.appendChild(td(r.steps, "num"));
      tr.appendChild(td(r.tool_calls, "num"));
      tr.appendChild(td(when(r.started)));
      tr.appendChild(td(when(r.last)));
      tr.hidden = !visible(r);
    }
    // arrange puts the rows in order: newest first, as jetloop turns lists
    // them, each workflow followed by its tasks' turns. Only rows out of
    // place are moved, so a row's highlight is not restarted.
    function arrange() {
      var top = [], kids = new Map();
      rows.forEach(function (r, id) {
        var p = parents.get(id);
        if (p && rows.has(p.wf)) {
          if (!kids.has(p.wf)) kids.set(p.wf, []);
          kids.get(p.wf).push({ id: id, task: p.task });
        } else {
          top.push(r);
        }
      });
      top.sort(function (a, b) { return a.started < b.started ? 1 : a.started > b.started ? -1 : a.turn_id < b.turn_id ? -1 : 1; });
      var at = tbody.firstChild;
      function put(id) {
        var tr = trs.get(id);
        if (tr === at) { at = at.nextSibling; return; }
        tbody.insertBefore(tr, at);
      }
      top.forEach(function (r) {
        put(r.turn_id);
        (kids.get(r.turn_id) || []).sort(function (a, b) { return a.task - b.task; }).forEach(function (k) { put(k.id); });
      });
    }
    var trs = new Map();
    function upsert(list, fresh) {
      var redraw = new Set();
      list.forEach(function (r) {
        rows.set(r.turn_id, r);
        redraw.add(r.turn_id);
        if (!r.workflow) return;
        // Its tasks' rows, drawn before it arrived, now go under it.
        r.workflow.turns.forEach(function (t) {
          var old = parents.get(t.turn_id);
          parents.set(t.turn_id, { wf: r.turn_id, task: t.task });
          if (!old && rows.has(t.turn_id)) redraw.add(t.turn_id);
        });
      });
      redraw.forEach(function (id) {
        var r = rows.get(id);
        var tr = trs.get(id);
        if (!tr) {
          tr = el("tr");
          trs.set(id, tr);
        }
        draw(tr, r);
      });
      arrange();
      list.forEach(function (r) {
        var tr = trs.get(r.turn_id);
        if (fresh) {
          tr.classList.remove("fresh");
          void tr.offsetWidth; // restart the highlight
          tr.classList.add("fresh");
        }
        option(fa, r.agent);
        option(fk, r.kind);
      });
      count();
    }
    function count() {
      var shown = 0;
      rows.forEach(function (r) { if (matches(r)) shown++; });
      $("count").textContent = shown + " of " + rows.size + " shown";
      show($("empty"), rows.size === 0);
    }
    function refilter() {
      var p = new URLSearchParams();
      if (fs.value) p.set("status", fs.value);
      if (fa.value) p.set("agent", fa.value);
      if (fk.value) p.set("kind", fk.value);
      history.replaceState(null, "", location.pathname + (p.toString() ? "?" + p : ""));
      trs.forEach(function (tr, id) { tr.hidden = !visible(rows.get(id)); });
      count();
    }
    [fs, fa, fk].forEach(function (s) { s.addEventListener("change", refilter); });
    var loaded = false;
    live("/api/turns/live", {
      rows: function (list) {
        upsert(list, loaded);
        loaded = true;
        document.body.setAttribute("data-loaded", "true");
      }
    });
  }

  // outcome shows how a turn or a workflow stopped, under its chart.
  function outcome(tl) {
    var f = tl && tl.finished;
    show($("outcome"), !!f);
    if (!f) return;
    $("outcome-title").textContent = "Stopped: " + f.stop_reason;
    $("outcome-error").textContent = f.error || "";
    show($("outcome-error"), !!f.error);
    $("outcome-output").textContent = f.output || "";
    show($("outcome-output"), !!f.output);
  }

  // table fills the event table with a log's rows.
  function table(rows) {
    var body = document.querySelector("#events tbody");
    body.textContent = "";
    rows.forEach(function (r) {
      var tr = el("tr", "", { id: "event-" + r.seq, "data-seq": r.seq, "data-step": r.step, "data-type": r.type });
      tr.appendChild(td(r.seq, "num"));
      tr.appendChild(td(r.step, "num"));
      tr.appendChild(td(since(r.since_ms), "num"));
      tr.appendChild(td(!r.before && !r.after ? "" : r.before === r.after ? r.after : r.before + " → " + r.after, "mono"));
      tr.appendChild(td(r.type, "type"));
      tr.appendChild(td(r.detail, "detail"));
      body.appendChild(tr);
    });
  }

  // The turn page: the timeline drawn again at every batch of events, the
  // model's text as it streams, and the controls the turn's state allows.
  function turnPage() {
    var id = decodeURIComponent(location.pathname.split("/").pop());
    $("turn-id").textContent = id;
    document.title = "turn " + id + " · jetloop";
    var chart = null, streamed = { step: 0, text: "" }, waitingOn = "";

    function header(v) {
      var tl = v.timeline, s = v.summary;
      var status = !tl ? (v.rows && v.rows.length ? "log" : "waiting") : s ? (s.status === "finished" ? s.stop_reason : s.status) :
        tl.finished ? tl.finished.stop_reason : "running";
      var badge = $("status");
      badge.textContent = status;
      badge.className = "badge status-" + status;
      document.body.setAttribute("data-status", status);
      var meta = $("meta");
      meta.textContent = "";
      function part(label, value) {
        if (value === undefined || value === null || value === "") return;
        if (meta.childNodes.length) meta.appendChild(document.createTextNode(" · "));
        meta.appendChild(document.createTextNode(label + " "));
        meta.appendChild(el("b", "", {}, value));
      }
      if (tl) {
        part("agent", tl.agent);
        part("model", tl.model);
        part("session", tl.session_id);
        part("started", when(tl.started));
        if (tl.forked_from) part("forked from", tl.forked_from.turn_id + " at step " + tl.forked_from.step);
        if (tl.workflow) {
          meta.appendChild(document.createTextNode(" · task " + tl.workflow.task + " of workflow "));
          meta.appendChild(link(workflowHref(tl.workflow.workflow_id), tl.workflow.workflow_id));
        }
        if (tl.parent) {
          // A subagent's turn: back to the call of its parent that runs it.
          meta.appendChild(document.createTextNode(" · subagent of turn "));
          var up = link(turnHref(tl.parent.turn_id) + "#call-" + encodeURIComponent(tl.parent.call_id), tl.parent.turn_id);
          up.id = "parent-link";
          meta.appendChild(up);
          meta.appendChild(document.createTextNode(" (call " + tl.parent.call_id + ", depth " + tl.parent.depth + ")"));
        }
        var m = tl.finished && tl.finished.metrics;
        $("metrics").textContent = m ? m.steps + " steps · " + m.tool_calls + " tool calls · " + m.model_calls + " model calls · " +
          m.input_tokens + " tokens in / " + m.output_tokens + " out · " + m.duration_ms + " ms" :
          "running: " + tl.rows.length + " events over " + tl.steps.length + " steps";
        $("input").textContent = tl.input || "";
        show($("input"), !!tl.input);
      } else {
        $("metrics").textContent = v.rows && v.rows.length ? v.rows.length + " events" : "no events yet: waiting for the first";
      }
    }

    function controls(v) {
      var s = v.summary;
      var on = info.can_control && !!s && s.status !== "finished";
      show($("controls"), on);
      if (!on) return;
      var w = s.waiting;
      var key = w ? w.kind + ":" + w.call_id : "";
      if (key !== waitingOn) {
        // A new question: its own empty answer box.
        waitingOn = key;
        $("reply-text").value = "";
        $("approval-note").value = "";
      }
      show($("ask"), !!w && w.kind === "input");
      show($("approval"), !!w && w.kind === "approval");
      if (w && w.kind === "input") $("ask-question").textContent = w.question || "";
      if (w && w.kind === "approval") {
        $("approval-tool").textContent = w.tool;
        $("approval-args").textContent = JSON.stringify(w.arguments, null, 2);
      }
    }

    function streaming(tl) {
      // The streamed text is shown until its step's answer is in the log.
      var s = tl && tl.steps.find(function (x) { return x.step === streamed.step; });
      if (s && s.model && !s.model.open) streamed.text = "";
      if (tl && !tl.running) streamed.text = "";
      $("streaming-step").textContent = streamed.step;
      $("streaming-text").textContent = streamed.text;
      show($("streaming"), streamed.text !== "");
    }

    var current = null;
    function render(v) {
      if (!v.timeline && v.rows && v.rows.length && String(v.rows[0].type).indexOf("workflow.") === 0) {
        // A workflow's log: its own page draws it.
        location.replace(workflowHref(id));
        return;
      }
      current = v;
      var tl = v.timeline;
      header(v);
      show($("chart"), !!tl);
      if (tl) {
        if (!chart) chart = window.jetloopTimeline(tl, { turnHref: turnHref }); else chart.update(tl);
        table(tl.rows);
        $("kind").textContent = "turn";
      } else if (v.rows && v.rows.length) {
        var kind = String(v.rows[0].type).split(".")[0];
        $("kind").textContent = kind;
        $("note").textContent = "This log is not a turn's (its first event is " + v.rows[0].type +
          "): its events are listed as they are." + (v.error ? " " + v.error : "");
        show($("note"), true);
        table(v.rows);
      }
      outcome(tl);
      controls(v);
      streaming(tl);
      document.body.setAttribute("data-events", tl ? tl.rows.length : (v.rows || []).length);
    }

    function send(body, button) {
      var out = $("control-result");
      button.disabled = true;
      return post("/api/turns/" + encodeURIComponent(id) + "/control", body).then(function (r) {
        button.disabled = false;
        if (r.ok) {
          say(out, "sent " + body.action + "; the page follows the turn");
          return true;
        }
        if (r.status === 403) {
          info.can_control = false;
          if (current) controls(current);
        }
        say(out, r.body.error || "failed (" + r.status + ")", true);
        return false;
      });
    }
    $("reply-send").addEventListener("click", function () {
      var w = current && current.summary && current.summary.waiting;
      if (!w) return;
      send({ action: "reply", call_id: w.call_id, answer: $("reply-text").value }, $("reply-send"));
    });
    function decide(approved, button) {
      var w = current && current.summary && current.summary.waiting;
      if (!w) return;
      send({ action: "approve", call_id: w.call_id, approved: approved, note: $("approval-note").value }, button);
    }
    $("approve").addEventListener("click", function () { decide(true, $("approve")); });
    $("deny").addEventListener("click", function () { decide(false, $("deny")); });
    $("abort").addEventListener("click", function () {
      if (!window.confirm("Abort turn " + id + "?")) return;
      send({ action: "abort", reason: "aborted from jetloop ui" }, $("abort"));
    });

    // A running turn goes on between its events: what is open (a model
    // call, a tool call, a pause) is drawn up to now, once a second.
    setInterval(function () {
      var tl = current && current.timeline;
      if (!tl || !tl.running || !chart) return;
      var now = Date.now() - Date.parse(tl.started), last = tl.end_ms;
      if (!(now > last)) return;
      function grow(x) { if (x && x.open && x.end_ms >= last) x.end_ms = now; }
      tl.steps.forEach(function (s) { grow(s); grow(s.model); s.tools.forEach(grow); });
      tl.pauses.forEach(grow);
      grow(tl.summary);
      tl.end_ms = now;
      chart.update(tl);
    }, 1000);

    live("/api/turns/" + encodeURIComponent(id) + "/live", {
      turn: render,
      delta: function (d) {
        if (d.step !== streamed.step) streamed = { step: d.step, text: "" };
        streamed.text += d.delta;
        streaming(current && current.timeline);
      }
    });
  }

  // The workflow page: its tasks, each linking to its turn's page, and the
  // timeline of the workflow with one band per task, drawn again at every
  // batch of events of the workflow or of its tasks' turns.
  function workflowPage() {
    var id = decodeURIComponent(location.pathname.split("/").pop());
    $("workflow-id").textContent = id;
    document.title = "workflow " + id + " · jetloop";
    var chart = null, current = null;

    function header(v) {
      var tl = v.timeline;
      var status = !tl ? "waiting" : tl.finished ? tl.finished.stop_reason : tl.phase === "paused" ? "paused" : "running";
      var badge = $("status");
      badge.textContent = status;
      badge.className = "badge status-" + status;
      document.body.setAttribute("data-status", status);
      var meta = $("meta");
      meta.textContent = "";
      if (!tl) {
        $("metrics").textContent = "no events yet: waiting for the first";
        return;
      }
      [["agent", tl.agent], ["session", tl.session_id], ["started", when(tl.started)],
        ["task", tl.tasks.length + " of " + tl.task_count], ["state", tl.phase]].forEach(function (p) {
        if (!p[1]) return;
        if (meta.childNodes.length) meta.appendChild(document.createTextNode(" · "));
        meta.appendChild(document.createTextNode(p[0] + " "));
        meta.appendChild(el("b", "", {}, p[1]));
      });
      var m = tl.metrics;
      $("metrics").textContent = (tl.running ? "so far: " : "") + m.tasks + " tasks finished · " + m.steps + " steps · " +
        m.tool_calls + " tool calls · " + m.model_calls + " model calls · " + m.input_tokens + " tokens in / " +
        m.output_tokens + " out · " + m.duration_ms + " ms in turns";
    }

    function tasks(tl) {
      var body = document.querySelector("#tasks tbody");
      body.textContent = "";
      var list = tl ? tl.tasks : [];
      list.forEach(function (k) {
        var tr = el("tr", "", { "data-task": k.task, "data-turn": k.turn_id, "data-status": k.open ? "running" : "finished" });
        tr.appendChild(td(k.task, "num"));
        var turn = el("td", "mono");
        turn.appendChild(link(turnHref(k.turn_id), k.turn_id));
        tr.appendChild(turn);
        tr.appendChild(td(k.agent || "-"));
        tr.appendChild(td(k.open ? (tl.running ? "running" : "cut short") : "finished: " + k.stop_reason,
          "st " + (k.open ? "running" : "stop-" + k.stop_reason)));
        var m = k.metrics;
        tr.appendChild(td(m ? m.steps : "", "num"));
        tr.appendChild(td(m ? m.tool_calls : "", "num"));
        tr.appendChild(td(m ? m.input_tokens + " / " + m.output_tokens : "", "num"));
        tr.appendChild(td(clip(k.input, 160) + (k.missing ? " (" + k.missing + ")" : ""), "reason"));
        body.appendChild(tr);
      });
      show($("no-tasks"), list.length === 0);
    }

    function render(v) {
      if (v.is_turn) {
        // A turn's id: its own page draws it.
        location.replace(turnHref(id));
        return;
      }
      current = v;
      var tl = v.timeline;
      header(v);
      tasks(tl);
      show($("chart"), !!tl);
      if (tl) {
        var opts = { taskHref: function (k) { return turnHref(k.turn_id); }, turnHref: turnHref };
        if (!chart) chart = window.jetloopTimeline(tl, opts); else chart.update(tl);
        table(tl.rows);
      }
      $("note").textContent = v.error || "";
      show($("note"), !!v.error);
      outcome(tl);
      document.body.setAttribute("data-events", tl ? tl.rows.length : 0);
      document.body.setAttribute("data-tasks", tl ? tl.tasks.length : 0);
    }

    // A running workflow goes on between its events: its open task, that
    // task's open calls and a gate's wait are drawn up to now, once a second.
    setInterval(function () {
      var tl = current && current.timeline;
      if (!tl || !tl.running || !chart) return;
      var now = Date.now() - Date.parse(tl.started), last = tl.end_ms;
      if (!(now > last)) return;
      function grow(x) { if (x && x.open && x.end_ms >= last) x.end_ms = now; }
      tl.tasks.forEach(function (k) {
        grow(k);
        var t = k.turn;
        if (!t || !t.running) return;
        t.steps.forEach(function (s) { grow(s); grow(s.model); s.tools.forEach(grow); });
        t.pauses.forEach(grow);
        grow(t.summary);
        t.end_ms = now;
      });
      tl.waits.forEach(grow);
      tl.end_ms = now;
      chart.update(tl);
    }, 1000);

    live("/api/workflows/" + encodeURIComponent(id) + "/live", { workflow: render });
  }

  // The dead letters page.
  function deadPage() {
    var tbody = document.querySelector("#letters tbody");
    var trs = new Map();
    var msg = $("message");
    function letterRow(l) {
      var tr = el("tr", "", { "data-seq": l.seq });
      tr.appendChild(td(l.seq, "num"));
      tr.appendChild(td(when(l.time)));
      tr.appendChild(td(l.kind));
      tr.appendChild(td(l.subject, "mono"));
      var turn = el("td", "mono");
      if (l.turn_id) turn.appendChild(link(turnHref(l.turn_id), l.turn_id)); else turn.textContent = "-";
      tr.appendChild(turn);
      tr.appendChild(td(clip(l.reason, 160), "reason"));
      var act = el("td");
      var showB = el("button", "", { type: "button" }, "show");
      showB.addEventListener("click", function () { open(l.seq); });
      act.appendChild(showB);
      if (info.can_retry) {
        var retry = el("button", "", { type: "button", "data-retry": l.seq }, "retry");
        retry.addEventListener("click", function () {
          retry.disabled = true;
          post("/api/dead/" + l.seq + "/retry", {}).then(function (r) {
            retry.disabled = false;
            if (!r.ok) { say(msg, r.body.error || "failed (" + r.status + ")", true); return; }
            say(msg, "re-sent dead letter " + l.seq + " to " + r.body.subject + " (" + r.body.stream + " seq " + r.body.stream_seq + ")" +
              (r.body.note ? ": " + r.body.note : ""));
            if (r.body.removed) { tr.remove(); trs.delete(l.seq); count(); }
          });
        });
        act.appendChild(document.createTextNode(" "));
        act.appendChild(retry);
      }
      tr.appendChild(act);
      return tr;
    }
    function count() { show($("empty"), trs.size === 0); }
    function open(seq) {
      fetch("/api/dead/" + seq).then(function (r) { return r.json(); }).then(function (d) {
        if (d.error) { say(msg, d.error, true); return; }
        $("letter-seq").textContent = d.seq + " · " + d.subject;
        var dl = $("letter-headers");
        dl.textContent = "";
        Object.keys(d.headers || {}).sort().forEach(function (k) {
          d.headers[k].forEach(function (v) {
            dl.appendChild(el("dt", "", {}, k));
            dl.appendChild(el("dd", "", {}, v));
          });
        });
        var text = d.payload;
        try { text = JSON.stringify(JSON.parse(d.payload), null, 2); } catch (e) { /* not JSON: as it is */ }
        $("letter-payload").textContent = text;
        show($("letter"), true);
      });
    }
    live("/api/dead/live", {
      letters: function (list) {
        list.forEach(function (l) {
          var tr = letterRow(l), old = trs.get(l.seq);
          if (old) old.replaceWith(tr); else tbody.appendChild(tr);
          trs.set(l.seq, tr);
        });
        count();
        document.body.setAttribute("data-loaded", "true");
      }
    });
  }

  var pages = { turns: turnsPage, turn: turnPage, workflow: workflowPage, dead: deadPage };
  fetch("/api/info").then(function (r) { return r.json(); }).then(function (i) { info = i; }, function () {}).then(function () {
    document.body.setAttribute("data-can-control", String(info.can_control));
    pages[document.body.getAttribute("data-page")]();
  });
})();
