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

  // The turns page: one row per log, kept current by the server's stream.
  function turnsPage() {
    var rows = new Map();
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
    function draw(tr, r) {
      tr.textContent = "";
      tr.setAttribute("data-turn", r.turn_id);
      tr.setAttribute("data-status", r.status);
      tr.setAttribute("data-kind", r.kind);
      var first = el("td", "mono");
      first.appendChild(link(turnHref(r.turn_id), r.turn_id));
      tr.appendChild(first);
      tr.appendChild(td(r.session_id === r.turn_id ? "-" : r.session_id, "mono"));
      tr.appendChild(td(r.kind));
      tr.appendChild(td(r.agent || "-"));
      tr.appendChild(td(statusText(r), statusClass(r)));
      tr.appendChild(td(r.steps, "num"));
      tr.appendChild(td(r.tool_calls, "num"));
      tr.appendChild(td(when(r.started)));
      tr.appendChild(td(when(r.last)));
      tr.hidden = !matches(r);
    }
    function place(tr, r) {
      // Newest first, as jetloop turns lists them.
      var before = null;
      for (var n = tbody.firstChild; n; n = n.nextSibling) {
        var o = rows.get(n.getAttribute("data-turn"));
        if (o && o !== r && (o.started < r.started || (o.started === r.started && o.turn_id > r.turn_id))) { before = n; break; }
      }
      if (tr.nextSibling !== before || tr.parentNode !== tbody) tbody.insertBefore(tr, before);
    }
    var trs = new Map();
    function upsert(list, fresh) {
      list.forEach(function (r) {
        var tr = trs.get(r.turn_id);
        if (!tr) {
          tr = el("tr");
          trs.set(r.turn_id, tr);
        }
        rows.set(r.turn_id, r);
        draw(tr, r);
        place(tr, r);
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
      trs.forEach(function (tr, id) { tr.hidden = !matches(rows.get(id)); });
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
      current = v;
      var tl = v.timeline;
      header(v);
      show($("chart"), !!tl);
      if (tl) {
        if (!chart) chart = window.jetloopTimeline(tl); else chart.update(tl);
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

  var pages = { turns: turnsPage, turn: turnPage, dead: deadPage };
  fetch("/api/info").then(function (r) { return r.json(); }).then(function (i) { info = i; }, function () {}).then(function () {
    document.body.setAttribute("data-can-control", String(info.can_control));
    pages[document.body.getAttribute("data-page")]();
  });
})();
