/*
 * pytrace's browser view: the live page of `pytrace web` and the HTML report of
 * `pytrace export --format html`. It only draws: every number comes computed from
 * pytrace's C aggregation (viewer/core/agg.h), live as deltas from the server,
 * or embedded in the report. Names from the traced program are data: they reach
 * the page through textContent and canvas fillText, never as HTML.
 */
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("pytrace-data").textContent);
  const LIVE = !DATA.report;
  const $ = (id) => document.getElementById(id);

  const state = {
    symbols: new Map(),  // id -> {name, file, line, kind}
    nodes: new Map(),    // key -> {key, parent, sym, calls, self, total, cself, ctotal} (c: the CPU parts)
    rows: new Map(),     // sym -> {sym, calls, prim, self, total, cself, ctotal}
    notObserved: { ns: 0, cpu_ns: 0, lost_events: 0 },  // the view's time nobody saw: in no node or row
    cpu: false,          // the time shown: wall, or CPU (waiting hidden)
    threads: [],         // [thread, os_tid, name, ended, events]
    cells: new Map(),    // "slice:thread" -> [slice, thread, sym, top_ns, busy_ns, calls]
    tl: { slice_ns: 1e8, group: 1, first: 0, last: 0 },
    status: {},
    span: 0,
    version: 0,
    updates: 0,
    view: { process: 0, thread: 0, window: 10, filter: "", step: false },  // step: the last step alone
    steps: null,         // the stepping thread's step summary and its last steps as bars (agg.h STEPS)
    tasks: null,         // the asyncio tasks for the chooser (web/data.py tasks_of), null: none
    taskZoom: null,      // the chosen task's flame graph's zoom: {of: "process:serial", path: its frame's
                         // symbol ids from the root} (node keys are indexes: a new tree's name other frames)
    taskDrawn: [],       // and its rectangles as last drawn
    processes: [],       // [key, pid, title] (one page, several processes; a report: its processes)
    zoom: 0,
    search: "",
    paused: false,
    sort: { key: "self", desc: true },
    drawn: [],           // the flame graph's rectangles as last drawn
    error: "",
  };

  // ---- formatting ----------------------------------------------------------
  function fmtNs(ns) {
    if (ns < 1e3) return ns.toFixed(0) + " ns";
    if (ns < 1e6) return (ns / 1e3).toPrecision(3) + " \u00b5s";
    if (ns < 1e9) return (ns / 1e6).toPrecision(3) + " ms";
    return (ns / 1e9).toPrecision(4) + " s";
  }
  function fmtCount(n) {
    if (n < 1e4) return String(n);
    if (n < 1e6) return (n / 1e3).toFixed(1) + "k";
    if (n < 1e9) return (n / 1e6).toFixed(1) + "M";
    return (n / 1e9).toFixed(2) + "G";
  }
  function sym(id) {
    if (id === -2) return { name: "[other]", file: "", line: 0, kind: -2 };
    if (id < 0) return { name: "all", file: "", line: 0, kind: -1 };
    return state.symbols.get(id) || { name: "<unknown #" + id + ">", file: "", line: 0, kind: 0 };
  }
  function where(s) {
    return s.file ? (s.line > 0 ? s.file + ":" + s.line : s.file) : (s.kind === 1 ? "(C function)" : s.kind === 2 ? "(span)" :
      s.kind === -2 ? "(calls folded past the tree budget)" : "");
  }
  function hash(str) {
    let h = 2166136261;
    for (let i = 0; i < str.length; i++) { h ^= str.charCodeAt(i); h = Math.imul(h, 16777619); }
    return h >>> 0;
  }
  // wall time: a frame that mostly waits (more than half of its time off a CPU) in its own colour
  const WAITING = "#b7aec9";
  function waits(n) { return n.total > 0 && n.total - n.ctotal > n.total / 2; }
  // the time shown of a node or row (wall, or its CPU part), from the C core's figures
  function tot(n) { return state.cpu ? n.ctotal : n.total; }
  function own(n) { return state.cpu ? n.cself : n.self; }
  function color(s) {
    const h = hash(s.name);
    if (s.kind === 1) return "hsl(" + (190 + h % 40) + ",55%," + (62 + h % 12) + "%)";   // C: blue
    if (s.kind === 2) return "hsl(" + (95 + h % 40) + ",45%," + (58 + h % 12) + "%)";    // span: green
    if (s.kind < 0) return "hsl(0,0%,80%)";
    return "hsl(" + (h % 55) + ",80%," + (58 + (h >> 8) % 14) + "%)";                    // Python: warm
  }

  // ---- applying data -----------------------------------------------------------
  function applySymbols(list) {
    for (const [id, name, file, line, kind] of list) state.symbols.set(id, { name, file, line, kind });
  }
  function applyNodes(list, removed) {
    for (const k of removed || []) state.nodes.delete(k);
    for (const [key, parent, s, calls, self, total, cself, ctotal] of list)
      state.nodes.set(key, { key, parent, sym: s, calls, self, total, cself, ctotal });
    if (!state.nodes.has(state.zoom)) state.zoom = 0;
  }
  function applyRows(list, removed) {
    for (const k of removed || []) state.rows.delete(k);
    for (const [s, calls, prim, self, total, cself, ctotal] of list)
      state.rows.set(s, { sym: s, calls, prim, self, total, cself, ctotal });
  }
  function applyTimeline(tl) {
    for (const [k, c] of state.cells)
      if (c[0] < tl.first - (tl.first % tl.group) || (tl.since !== undefined && c[0] >= tl.since - (tl.since % tl.group)))
        state.cells.delete(k);
    for (const c of tl.cells) state.cells.set(c[0] + ":" + c[1], c);
    state.tl = tl;
  }
  function applyUpdate(u) {
    if (u.full) { state.symbols.clear(); state.nodes.clear(); state.rows.clear(); state.cells.clear(); }
    applySymbols(u.symbols);
    if (u.threads) state.threads = u.threads;
    applyNodes(u.nodes, u.removed);
    applyRows(u.rows, u.rows_removed);
    applyTimeline(u.timeline);
    state.span = u.span_ns;
    if (u.not_observed) state.notObserved = u.not_observed;
    state.status = u.status;
    if (u.job) state.job = u.job;
    if (u.processes) state.processes = u.processes;
    state.steps = u.steps || null;
    if ("tasks" in u) state.tasks = u.tasks;   // sent when it changed
    state.version = u.version;
    state.updates++;
  }
  // A report of several processes: each one's pictures (DATA.procs by process key)
  function reportProcess() {
    if (!DATA.procs) return DATA;
    return DATA.procs[String(state.view.process)] || DATA.procs[String(DATA.first_process)];
  }
  function applyReportProcess() {
    const P = reportProcess();
    state.symbols.clear();
    applySymbols(P.symbols);
    state.threads = P.threads;
    state.status = P.status;
    state.steps = P.steps || null;
    state.tasks = P.tasks || null;
    const F = DATA.procs ? (DATA.procs[String(DATA.first_process)] || P) : P;  // the job
    state.job = { pid: (F.status || {}).pid, command: (F.status || {}).command };
    state.cells.clear();
    applyTimeline(P.timeline);
  }
  function applyReportView() {
    const P = reportProcess();
    let v = (state.view.step && P.views.step) || P.views[String(state.view.thread)] || P.views["0"];
    if (v.same_as !== undefined) v = P.views[v.same_as];
    state.nodes.clear(); state.rows.clear();
    applyNodes(v.nodes, []);
    applyRows(v.rows, []);
    state.span = v.span_ns;
    state.notObserved = v.not_observed || { ns: 0, cpu_ns: 0, lost_events: 0 };
  }

  // ---- canvases ------------------------------------------------------------------
  // A canvas made width x height CSS pixels, drawn at the screen's resolution
  // (devicePixelRatio): its cleared 2d context, in CSS pixels, text centred on y.
  function canvasContext(canvas, width, height, font) {
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.height = height + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = font;
    ctx.textBaseline = "middle";
    return ctx;
  }

  // ---- flame graph -------------------------------------------------------------
  const ROW = 18;
  function children(nodes) {
    const kids = new Map();
    for (const n of nodes.values()) {
      if (n.parent < 0) continue;
      let l = kids.get(n.parent);
      if (!l) kids.set(n.parent, l = []);
      l.push(n);
    }
    for (const l of kids.values())
      l.sort((a, b) => { const x = sym(a.sym).name, y = sym(b.sym).name; return x < y ? -1 : x > y ? 1 : a.key - b.key; });
    return kids;
  }
  function matches(s) { return state.search !== "" && s.name.toLowerCase().includes(state.search); }

  // An icicle graph of `nodes` (key -> node) on `canvas`, zoomed on node `zoomKey`: widths by
  // size(node); waiting(node): drawn in the waiting colour. Returns what it drew, and the
  // number of frames matching the search.
  function drawIcicle(canvas, nodes, zoomKey, size, waiting, empty) {
    const width = canvas.clientWidth || 800;
    const kids = children(nodes);
    const zoom = nodes.get(zoomKey) || nodes.get(0);
    const drawn = [];
    let matched = 0;
    if (zoom && size(zoom) > 0) {
      // the path from the root down to the zoomed frame, full width
      const path = [];
      for (let n = zoom; n; n = n.parent >= 0 ? nodes.get(n.parent) : null) path.unshift(n);
      path.forEach((n, depth) => drawn.push({ node: n, x: 0, y: depth * ROW, w: width }));
      const scale = width / size(zoom);
      const stack = [[zoom, 0, path.length - 1]];
      while (stack.length) {
        const [n, x, depth] = stack.pop();
        let cx = x;
        for (const c of kids.get(n.key) || []) {
          const w = size(c) * scale;
          if (w >= 0.5) {
            drawn.push({ node: c, x: cx, y: (depth + 1) * ROW, w });
            stack.push([c, cx, depth + 1]);
          }
          cx += w;
        }
      }
    }
    const height = Math.max(ROW * 3, ...drawn.map((r) => r.y + ROW)) + 2;
    const ctx = canvasContext(canvas, width, height, "12px monospace");
    for (const r of drawn) {
      const s = sym(r.node.sym);
      const hit = matches(s);
      if (hit) matched++;
      ctx.fillStyle = hit ? "#d500f9" : state.search ? "hsl(0,0%,86%)" : waiting(r.node) ? WAITING : color(s);
      ctx.fillRect(r.x, r.y, Math.max(r.w - 1, 0.5), ROW - 1);
      if (r.w > 24) {
        ctx.fillStyle = hit ? "#fff" : "#111";
        let label = s.name;
        const room = r.w - 6;
        if (ctx.measureText(label).width > room) {
          let lo = 0, hi = label.length;
          while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (ctx.measureText(label.slice(0, mid) + "\u2026").width <= room) lo = mid; else hi = mid - 1; }
          label = lo > 0 ? label.slice(0, lo) + "\u2026" : "";
        }
        if (label) ctx.fillText(label, r.x + 3, r.y + ROW / 2);
      }
    }
    if (!drawn.length) {
      ctx.fillStyle = "#777";
      ctx.fillText(empty, 8, ROW);
    }
    return { drawn, matched };
  }
  function drawFlame() {
    const d = drawIcicle($("flame"), state.nodes, state.zoom, tot, (n) => !state.cpu && waits(n),
                         LIVE ? "(no calls in this view yet)" : "(no calls in this view)");
    state.drawn = d.drawn;
    $("matches").textContent = state.search ? d.matched + " matching frame" + (d.matched === 1 ? "" : "s") : "";
  }
  function frameAt(ev, canvas, drawn) {
    const rect = (canvas || $("flame")).getBoundingClientRect();
    const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
    drawn = drawn || state.drawn;
    for (let i = drawn.length - 1; i >= 0; i--) {
      const r = drawn[i];
      if (x >= r.x && x < r.x + r.w && y >= r.y && y < r.y + ROW) return r;
    }
    return null;
  }
  function showTip(ev, lines) {
    const tip = $("tip");
    tip.textContent = lines.join("\n");
    tip.hidden = false;
    const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    tip.style.left = Math.max(0, x) + "px";
    tip.style.top = (ev.clientY + 16) + "px";
  }
  function hideTip() { $("tip").hidden = true; }
  function nodeTip(n) {
    const s = sym(n.sym);
    const span = state.span || 1;
    const what = state.cpu ? " CPU" : "";
    const lines = [s.name, where(s), "self" + what + "  " + fmtNs(own(n)) + "  (" + (100 * own(n) / span).toFixed(1) + "%)",
                   "total" + what + " " + fmtNs(tot(n)) + "  (" + (100 * tot(n) / span).toFixed(1) + "%)"];
    if (!state.cpu)
      lines.push("on a CPU " + fmtNs(n.ctotal) + ", waiting " + fmtNs(Math.max(0, n.total - n.ctotal)));
    lines.push("calls " + n.calls);
    return lines;
  }

  // ---- timeline ------------------------------------------------------------------
  const LABEL_W = 140, TL_ROW = 16;
  let tlLayout = null;
  function drawTimeline() {
    const canvas = $("timeline");
    const width = canvas.clientWidth || 800;
    const tl = state.tl;
    const group = tl.group || 1;
    const first = tl.first - (tl.first % group);
    const cellsN = Math.max(1, Math.floor((tl.last - first) / group) + 1);
    const threadIds = [];
    const seen = new Set();
    for (const c of state.cells.values()) if (!seen.has(c[1])) { seen.add(c[1]); threadIds.push(c[1]); }
    const order = new Map(state.threads.map((t, i) => [t[0], i]));
    threadIds.sort((a, b) => (order.get(a) ?? 1e9) - (order.get(b) ?? 1e9) || a - b);
    const height = Math.max(1, threadIds.length) * TL_ROW + 4;
    const ctx = canvasContext(canvas, width, height, "11px monospace");
    const cw = (width - LABEL_W) / cellsN;
    const names = new Map(state.threads.map((t) => [t[0], t[2] || ("thread " + t[0])]));
    threadIds.forEach((th, i) => {
      ctx.fillStyle = "#333";
      ctx.fillText(String(names.get(th) || "thread " + th).slice(0, 18), 2, i * TL_ROW + TL_ROW / 2);
      ctx.fillStyle = "#f4f4f4";
      ctx.fillRect(LABEL_W, i * TL_ROW, width - LABEL_W, TL_ROW - 2);
    });
    const cellNs = tl.slice_ns * group;
    const row = new Map(threadIds.map((th, i) => [th, i]));   // indexOf per cell was quadratic
    for (const c of state.cells.values()) {
      const i = row.has(c[1]) ? row.get(c[1]) : -1;
      const k = Math.floor((c[0] - first) / group);
      if (i < 0 || k < 0) continue;
      const s = sym(c[2]);
      ctx.globalAlpha = Math.min(1, 0.25 + 0.75 * c[4] / cellNs);
      ctx.fillStyle = c[2] >= 0 ? (matches(s) ? "#d500f9" : color(s)) : "#ccc";
      ctx.fillRect(LABEL_W + k * cw, i * TL_ROW, Math.max(cw - (cw > 3 ? 1 : 0), 1), TL_ROW - 2);
    }
    ctx.globalAlpha = 1;
    tlLayout = { first, group, cw, threadIds, cellNs };
    const secs = (cellsN * cellNs / 1e9);
    $("timeline-note").textContent = "(per thread, the function with the most own time in each " +
      fmtNs(cellNs) + "; the last " + secs.toFixed(secs < 10 ? 1 : 0) + " s)";
  }
  function timelineTip(ev) {
    if (!tlLayout) return null;
    const rect = $("timeline").getBoundingClientRect();
    const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
    const i = Math.floor(y / TL_ROW), k = Math.floor((x - LABEL_W) / tlLayout.cw);
    if (x < LABEL_W || i < 0 || i >= tlLayout.threadIds.length) return null;
    const slice = tlLayout.first + k * tlLayout.group;
    const c = state.cells.get(slice + ":" + tlLayout.threadIds[i]);
    if (!c) return null;
    const s = sym(c[2]);
    const t0 = (state.tl.origin_ns || 0) + slice * state.tl.slice_ns;
    return ["thread " + c[1] + "  at " + (t0 / 1e9).toFixed(2) + " s", c[2] >= 0 ? s.name : "(idle)",
            c[2] >= 0 ? where(s) : "", "top  " + fmtNs(c[3]), "busy " + (100 * c[4] / tlLayout.cellNs).toFixed(0) + "%",
            "calls " + c[5]];
  }

  // ---- table -----------------------------------------------------------------------
  const MAX_ROWS = 400;
  const NUM_COLS = 8, WALL_COLS = [2, 3, 5];   // columns of numbers; those shown in wall time only
  function sortedRows() {
    const rows = [...state.rows.values()];
    let filt = "";
    if (!LIVE && state.view.filter) filt = state.view.filter.toLowerCase();   // the server filters live
    const list = filt ? rows.filter((r) => sym(r.sym).name.toLowerCase().includes(filt)) : rows;
    const key = state.sort.key, dir = state.sort.desc ? -1 : 1;
    const val = {
      // own and total time: of the time shown (in CPU mode the wall columns are hidden)
      self_pct: own, total_pct: tot, self: own, total: tot, wait_pct: waitPct,
      self_cpu: (r) => r.cself, total_cpu: (r) => r.ctotal,
      calls: (r) => r.calls, name: (r) => sym(r.sym).name, file: (r) => where(sym(r.sym)),
    }[key] || own;
    list.sort((a, b) => { const x = val(a), y = val(b); return (x < y ? -1 : x > y ? 1 : a.sym - b.sym) * dir; });
    return list;
  }
  // the part of a row's own wall time off a CPU, in %
  function waitPct(r) { return r.self > 0 ? 100 * Math.max(0, r.self - r.cself) / r.self : 0; }
  function renderTable() {
    const body = document.querySelector("#table tbody");
    const rows = sortedRows();
    const span = state.span || 1;
    const frag = document.createDocumentFragment();
    for (const r of rows.slice(0, MAX_ROWS)) {
      const s = sym(r.sym);
      const tr = document.createElement("tr");
      if (matches(s)) tr.className = "match";
      // percentages of the observed wall time, of the time shown (wall, or CPU)
      const cells = [(100 * own(r) / span).toFixed(1), (100 * tot(r) / span).toFixed(1), waitPct(r).toFixed(1),
                     fmtNs(r.self), fmtNs(r.cself), fmtNs(r.total), fmtNs(r.ctotal),
                     r.calls === r.prim ? String(r.calls) : r.calls + "/" + r.prim, s.name, where(s)];
      cells.forEach((text, i) => {
        const td = document.createElement("td");
        td.textContent = text;
        if (i < NUM_COLS) td.className = WALL_COLS.includes(i) ? "num wall" : "num";
        if (i >= NUM_COLS) td.title = text;
        tr.appendChild(td);
      });
      frag.appendChild(tr);
    }
    body.replaceChildren(frag);
    // the time nobody saw: its own row, never in the percentages
    const no = state.notObserved;
    $("not-observed").hidden = !(no.ns > 0 || no.lost_events > 0);
    $("not-observed-wall").textContent = fmtNs(no.ns);
    $("not-observed-cpu").textContent = fmtNs(no.cpu_ns);
    $("not-observed-lost").textContent = no.lost_events + " events lost";
    $("table").classList.toggle("cpu", state.cpu);
    $("table-note").textContent = rows.length > MAX_ROWS ? "(the first " + MAX_ROWS + " of " + rows.length + ")" :
      "(" + rows.length + " functions)";
    for (const th of document.querySelectorAll("#table th")) {
      th.classList.toggle("sorted", th.dataset.key === state.sort.key);
      th.classList.toggle("asc", th.dataset.key === state.sort.key && !state.sort.desc);
    }
  }

  // ---- status and controls ------------------------------------------------------------
  function renderStatus() {
    const s = state.status;
    const el = $("status");
    const parts = [];
    if (state.error) parts.push(state.error);
    if (s.error) parts.push(s.error);
    // a damaged recording: the report shows everything before the damage, and says where
    if (s.damage) parts.push("DAMAGED RECORDING: " + s.damage);
    if (LIVE) {
      parts.push(s.state || "connecting", fmtCount(s.events_per_second || 0) + " events/s");
      if (state.paused) parts.unshift("PAUSED");
    } else {
      // how the process ended (a worker killed by a signal: died); a recording cut short says
      // nothing here (its damage line says it), never "running"
      parts.push("recording");
      if (["exited", "died", "stopped"].includes(s.state)) parts.push(s.state);
      parts.push(fmtNs(s.span_ns || 0));
    }
    parts.push(fmtCount(s.events || 0) + " events",
               "dropped " + (s.dropped || 0) + (s.dropped && s.dropped_cause ? " (" + s.dropped_cause + ")" : ""));
    if (s.other_losses) parts.push("the job also lost: " + s.other_losses);
    if (s.missed_in_hub) parts.push("this view missed " + s.missed_in_hub + " (" + s.missed_cause + ")");
    parts.push((s.threads || 0) + " threads", (s.processes || 1) + " process" + ((s.processes || 1) === 1 ? "" : "es"));
    const past = s.messages_past_process_limit || 0;
    if (past) parts.push(fmtCount(past) + " messages of processes past the first " + s.process_limit + " not shown");
    const noView = s.threads_without_view || 0;
    if (noView) parts.push(noView + " threads with few events have no view of their own (they are in all threads)");
    const unrecorded = s.unrecorded || 0;
    if (unrecorded) parts.push("INCOMPLETE: " + fmtCount(unrecorded) + " events not recorded (the recorder's disk was full)");
    if (s.folded_calls) parts.push(fmtCount(s.folded_calls) + " calls folded into [other] (tree budget " +
                                   Math.round((s.tree_budget || 0) / 1048576) + " MiB)");
    // events naming a symbol the stream never announced: damage (losses.unannounced_text's words)
    const unannounced = s.unannounced || 0;
    if (unannounced) parts.push("DAMAGE: " + fmtCount(unannounced) + " event" + (unannounced === 1 ? " names" : "s name") +
                                " symbols never announced: shown as <unknown #id>");
    el.textContent = parts.join(" \u00b7 ");
    el.classList.toggle("bad", !!state.error || !!s.error || !!s.damage || (s.dropped || 0) > 0 || !!s.other_losses ||
                        (s.missed_in_hub || 0) > 0 || past > 0 || unrecorded > 0 || unannounced > 0);
    $("title").textContent = (s.pid ? "pid " + s.pid + "  " : "") + (s.command || DATA.title || "");
    // the tab names the job (its first process), whichever process the page shows
    const job = state.job || {};
    document.title = "pytrace " + (job.pid ? job.pid + " " : s.pid ? s.pid + " " : "") +
                     (job.command || s.command || DATA.title || "");
  }
  function renderThreads() {
    const sel = $("thread");
    // a report lists the threads it has a view of (the busiest; the others are in all threads)
    const P = LIVE ? null : reportProcess();
    const listed = P ? state.threads.filter((t) => P.views[String(t[0])] !== undefined) : state.threads;
    const want = ["0"].concat(listed.map((t) => String(t[0])));
    const have = [...sel.options].map((o) => o.value);
    if (want.join(",") === have.join(",")) return;
    const cur = String(state.view.thread);
    sel.replaceChildren();
    const all = document.createElement("option");
    all.value = "0"; all.textContent = "all threads";
    sel.appendChild(all);
    for (const t of listed) {
      const o = document.createElement("option");
      o.value = String(t[0]);
      o.textContent = (t[2] || "thread") + " #" + t[0] + (t[3] ? " (ended)" : "");
      sel.appendChild(o);
    }
    sel.value = want.includes(cur) ? cur : "0";
  }
  function renderProcesses() {
    const sel = $("process");
    $("process-label").hidden = state.processes.length < 2;
    const want = state.processes.map((p) => String(p[0]));
    if (want.join(",") === [...sel.options].map((o) => o.value).join(",")) return;
    const cur = String(state.view.process);
    sel.replaceChildren();
    for (const [key, pid, title] of state.processes) {
      const o = document.createElement("option");
      o.value = String(key);
      const t = String(title).replace(/\s+/g, " ");
      // a report's title ends with the process's state: keep it when the command is cut
      const st = LIVE ? null : t.match(/ \((exited|died|stopped|running|\?)\)$/);
      o.textContent = "pid " + pid + "  " + (st && t.length > 40 ? t.slice(0, 40 - st[0].length) + "\u2026" + st[0] : t.slice(0, 40));
      sel.appendChild(o);
    }
    sel.value = want.includes(cur) ? cur : want[0] || "0";
  }
  // ---- steps: the summary line, a bar per step, the last-step toggle ------------------
  function renderSteps() {
    const st = state.steps;
    $("steps-section").hidden = !st;
    $("step").hidden = !st;
    if (!st) return;
    const label = st.label || "step";
    $("steps-note").textContent = "(" + label + " on thread #" + st.thread + "; a step runs from one step mark to the next, " +
                                  "the first from the thread's start)";
    const parts = [st.count + " steps", "last #" + st.count + " " + fmtNs(st.last_ns), "median " + fmtNs(st.median_ns),
                   "p10–p90 " + fmtNs(st.p10_ns) + "–" + fmtNs(st.p90_ns),
                   "mean " + fmtNs(st.mean_ns) + " sd " + fmtNs(st.stdev_ns),
                   "slowest #" + st.slowest_index + " " + fmtNs(st.max_ns)];
    if (st.folded) parts.push("percentiles of the last " + st.kept + " (" + st.folded + " older steps in the rest)");
    if (st.last_lost_events) parts.push("events lost inside the last step: " + st.last_lost_events);
    if (state.view.step) parts.unshift("SHOWING THE LAST STEP ALONE (wall time)");
    $("steps-summary").textContent = parts.join(" \u00b7 ");
    const canvas = $("steps");
    const width = canvas.parentElement.clientWidth || 800, height = 60;
    const ctx = canvasContext(canvas, width, height, "11px sans-serif");
    const bars = st.bars || [];
    if (!bars.length) return;
    let max = 0;
    for (const b of bars) max = Math.max(max, b[1]);
    const w = width / bars.length;
    for (let i = 0; i < bars.length; i++) {
      const h = max > 0 ? Math.max(1, (height - 2) * bars[i][1] / max) : 1;
      ctx.fillStyle = bars[i][0] === st.slowest_index ? "#c0392b" : i === bars.length - 1 ? "#2c7be5" : "#8aa4c8";
      ctx.fillRect(i * w, height - h, Math.max(1, w - (w > 3 ? 1 : 0)), h);
    }
  }
  // ---- asyncio tasks: the chooser and the chosen task's logical calls (viewer/core/tasks.h) --
  // task = [serial, name, coroutine, state, steps, run_ns, wait_ns, {kind: ns}, [[kind, name]],
  //         [[symbol id, logical calls, self_ns, total_ns]], its number of functions,
  //         its flame graph [[symbol id, parent index, calls, self_ns, total_ns]] or null]
  //         (web/data.py tasks_of)
  let tasksShown = null;   // the list the chooser's options were made from
  function chosenTask() {   // the chosen task's serial (-1: none): a live page is sent its functions
    const v = $("task-choice").value;
    return v === "" ? -1 : Number(v);
  }
  function renderTasks() {
    const T = state.tasks;
    $("tasks-section").hidden = !T;
    if (!T) return;
    const parts = [T.seen + " tasks seen"];
    if (T.shown < T.kept) parts.push("the " + T.shown + " with the most running plus waiting time in the chooser");
    if (T.folded) parts.push(T.folded + " done tasks folded into the totals (memory budget)");
    if (T.malformed) parts.push(T.malformed + " task records ignored as damaged");
    $("tasks-summary").textContent = parts.join(" \u00b7 ");
    const sel = $("task-choice");
    const byTime = T.list.slice().sort((a, b) => (b[5] + b[6]) - (a[5] + a[6]) || a[0] - b[0]);
    if (tasksShown !== T.list) {   // remade only when a new list came (an open chooser stays open)
      const cur = sel.value;
      const frag = document.createDocumentFragment();
      for (const t of byTime) {
        const o = document.createElement("option");
        o.value = String(t[0]);
        o.textContent = t[1] + "  #" + t[0] + "  " + t[3] + "  run " + fmtNs(t[5]) + "  wait " + fmtNs(t[6]);
        frag.appendChild(o);
      }
      sel.replaceChildren(frag);
      sel.value = byTime.some((t) => String(t[0]) === cur) ? cur : (byTime.length ? String(byTime[0][0]) : "");
      tasksShown = T.list;
    }
    const t = T.list.find((x) => String(x[0]) === sel.value);
    const body = document.querySelector("#task-fns tbody");
    if (!t) {
      $("task-detail").textContent = ""; $("task-note").textContent = ""; body.replaceChildren();
      drawTaskFlame(null);
      return;
    }
    const waits = Object.entries(t[7]).sort((a, b) => b[1] - a[1]).map(([k, ns]) => k + " " + fmtNs(ns));
    const detail = [t[1] + " (" + t[2] + ")", t[3], t[4] + " steps", "running " + fmtNs(t[5]),
                    "waiting " + fmtNs(t[6]) + (waits.length ? " (" + waits.join(", ") + ")" : "")];
    if (t[8].length) detail.push("waits on: " + t[8].map(([k, n]) => k + " " + n).join(", "));
    $("task-detail").textContent = detail.join(" \u00b7 ");
    // t[10]: its number of functions (null: not sent yet; a live page asks for the chosen one's)
    $("task-note").textContent = t[10] === null ? "(its functions come with the next update)" :
      t[10] > t[9].length ? "(the first " + t[9].length + " of " + t[10] + " functions, by total time)" :
      "(" + t[10] + " functions)";
    const frag = document.createDocumentFragment();
    for (const [id, calls, self, total] of t[9]) {
      const s = sym(id);
      const tr = document.createElement("tr");
      [String(calls), fmtNs(self), fmtNs(total), s.name, where(s)].forEach((text, i) => {
        const td = document.createElement("td");
        td.textContent = text;
        if (i < 3) td.className = "num";
        tr.appendChild(td);
      });
      frag.appendChild(tr);
    }
    body.replaceChildren(frag);
    drawTaskFlame(t);
  }
  // The chosen task's own call tree (viewer/core/tasks.h): the task, its coroutine, its logical
  // calls, widths the time they ran (no waiting colour: a task's tree has running time only).
  let taskNodes = new Map(), taskPaths = [], taskOf = "";
  function drawTaskFlame(t) {
    const tree = t ? t[11] : null;
    taskNodes = new Map();
    taskPaths = [];
    taskOf = t ? state.view.process + ":" + t[0] : "";
    (tree || []).forEach(([s, parent, calls, self, total], key) => {
      taskNodes.set(key, { key, parent, sym: s, calls, self, total, cself: 0, ctotal: 0 });
      taskPaths[key] = (parent >= 0 && parent < key ? taskPaths[parent] + "," : "") + s;
    });
    if (state.taskZoom && state.taskZoom.of !== taskOf) state.taskZoom = null;   // another task's
    const zoomKey = state.taskZoom ? Math.max(taskPaths.indexOf(state.taskZoom.path), 0) : 0;
    $("task-flame-note").textContent = tree ? "(its logical calls from its coroutine, by the time they ran; click a " +
      "frame to zoom, hover for numbers)" : LIVE ? "(it comes with the next update)" :
      "(not in this report: it holds the flame graphs of the tasks with the most running time)";
    const d = drawIcicle($("task-flame"), taskNodes, zoomKey, (n) => n.total, () => false,
                         tree ? "(no running time in its calls)" : "");
    state.taskDrawn = d.drawn;
  }
  function taskNodeTip(n) {
    const s = sym(n.sym), root = taskNodes.get(0);
    if (n.parent === 0)   // the task itself: its name, its coroutine (the Task symbol's file), its serial
      return ["task " + s.name, "coroutine " + s.file + ", #" + s.line, "running " + fmtNs(n.total)];
    const pct = root && root.total ? " (" + (100 * n.total / root.total).toFixed(1) + "%)" : "";
    return [s.name, where(s), "self  " + fmtNs(n.self), "total " + fmtNs(n.total) + pct, "logical calls " + n.calls];
  }
  function render() {
    renderSteps();
    renderTasks();
    renderProcesses();
    renderThreads();
    drawFlame();
    drawTimeline();
    renderTable();
    renderStatus();
  }

  // ---- live: polling for deltas --------------------------------------------------------
  const session = Math.random().toString(36).slice(2) + Date.now().toString(36);
  let inflight = false;
  let viewGen = 0;     // bumped at each change of view: replies asked for an older one are dropped
  async function poll() {
    if (!state.paused && !inflight) {
      inflight = true;
      const v = state.view, gen = viewGen;
      const q = new URLSearchParams({ token: DATA.token, session, version: String(state.version),
                                      process: String(v.process),
                                      thread: String(v.thread), window: String(v.window), filter: v.filter,
                                      step: v.step ? "1" : "0", task: String(chosenTask()) });
      try {
        const r = await fetch("api/update?" + q.toString(), { cache: "no-store" });
        if (!r.ok) throw new Error("server answered " + r.status);
        const u = await r.json();
        // a reply to a view the user has left since (another process, thread, window or
        // filter) is dropped: its delta belongs to that view's session, not this one's
        if (!state.paused && gen === viewGen) { state.error = ""; applyUpdate(u); render(); }
      } catch (e) {
        state.error = "server unreachable: " + e.message;
        renderStatus();
      } finally {
        inflight = false;
      }
    }
    setTimeout(poll, DATA.interval_ms || 250);
  }
  function viewChanged() {
    state.zoom = 0;
    viewGen++;
    if (LIVE) { state.version = -1; } else { applyReportView(); render(); }
  }

  $("window").addEventListener("change", (e) => { state.view.window = Number(e.target.value); viewChanged(); });
  $("process").addEventListener("change", (e) => {
    state.view.process = Number(e.target.value);
    state.view.thread = 0;
    if (!LIVE) applyReportProcess();
    viewChanged();
  });
  $("task-choice").addEventListener("change", () => { state.taskZoom = null; renderTasks(); });   // a live page: the next update brings its functions
  $("thread").addEventListener("change", (e) => { state.view.thread = Number(e.target.value); viewChanged(); });
  $("filter").addEventListener("input", (e) => {
    state.view.filter = e.target.value;
    viewGen++;
    if (LIVE) state.version = -1; else renderTable();
  });
  $("search").addEventListener("input", (e) => { state.search = e.target.value.toLowerCase(); drawFlame(); drawTimeline(); renderTable(); });
  $("time").addEventListener("click", () => {
    state.cpu = !state.cpu;
    $("time").textContent = state.cpu ? "time: CPU, waiting hidden" : "time: wall";
    $("time").setAttribute("aria-pressed", String(state.cpu));
    document.body.classList.toggle("cpu", state.cpu);
    state.zoom = state.nodes.has(state.zoom) && tot(state.nodes.get(state.zoom)) > 0 ? state.zoom : 0;
    drawFlame();
    renderTable();
  });
  $("step").addEventListener("click", () => {
    state.view.step = !state.view.step;
    $("step").setAttribute("aria-pressed", String(state.view.step));
    $("step").textContent = state.view.step ? "all (not the last step)" : "last step";
    viewChanged();
    renderSteps();
  });
  $("pause").addEventListener("click", () => {
    state.paused = !state.paused;
    $("pause").textContent = state.paused ? "resume" : "pause";
    renderStatus();
  });
  $("reset").addEventListener("click", () => { state.zoom = 0; drawFlame(); });
  $("flame").addEventListener("click", (e) => { const r = frameAt(e); if (r) { state.zoom = r.node.key; drawFlame(); } });
  $("flame").addEventListener("mousemove", (e) => { const r = frameAt(e); if (r) showTip(e, nodeTip(r.node)); else hideTip(); });
  $("flame").addEventListener("mouseleave", hideTip);
  $("task-flame").addEventListener("click", (e) => {
    const r = frameAt(e, $("task-flame"), state.taskDrawn);
    if (r) { state.taskZoom = { of: taskOf, path: taskPaths[r.node.key] }; renderTasks(); }
  });
  $("task-flame").addEventListener("mousemove", (e) => {
    const r = frameAt(e, $("task-flame"), state.taskDrawn);
    if (r) showTip(e, taskNodeTip(r.node)); else hideTip();
  });
  $("task-flame").addEventListener("mouseleave", hideTip);
  $("timeline").addEventListener("mousemove", (e) => { const l = timelineTip(e); if (l) showTip(e, l); else hideTip(); });
  $("timeline").addEventListener("mouseleave", hideTip);
  for (const th of document.querySelectorAll("#table th"))
    th.addEventListener("click", () => {
      const key = th.dataset.key;
      if (state.sort.key === key) state.sort.desc = !state.sort.desc;
      else state.sort = { key, desc: key !== "name" && key !== "file" };
      renderTable();
    });
  window.addEventListener("resize", () => { drawFlame(); drawTimeline(); renderTasks(); });

  // For tests and the curious: what is on the screen, as data.
  window.pytrace = {
    state,
    frames: () => state.drawn.map((r) => ({ key: r.node.key, name: sym(r.node.sym).name, x: r.x, y: r.y, w: r.w,
                                            total: r.node.total, self: r.node.self, calls: r.node.calls,
                                            cpu_total: r.node.ctotal, cpu_self: r.node.cself,
                                            waiting: !state.cpu && waits(r.node) })),
    width: (name) => state.drawn.filter((r) => sym(r.node.sym).name === name).reduce((a, r) => a + r.w, 0),
    tooltip: () => ($("tip").hidden ? "" : $("tip").textContent),
    taskFrames: () => state.taskDrawn.map((r) => ({ key: r.node.key, name: sym(r.node.sym).name, x: r.x, y: r.y, w: r.w,
                                                    total: r.node.total, self: r.node.self, calls: r.node.calls })),
  };

  if (LIVE) {
    state.view.window = Number($("window").value);
    poll();
  } else {
    $("window-label").hidden = true;
    $("pause").hidden = true;
    if (DATA.processes) {
      state.processes = DATA.processes;
      state.view.process = DATA.first_process;
    }
    applyReportProcess();
    applyReportView();
    render();
  }
})();
