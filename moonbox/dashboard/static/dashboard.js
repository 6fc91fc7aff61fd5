// The moonbox dashboard page: reads /api/stream (server-sent events) and the JSON API,
// draws each panel with plain DOM and SVG, and posts actions. No outside code, no CDN.
"use strict";

(function () {
  const token = new URLSearchParams(location.search).get("token");
  const SVG = "http://www.w3.org/2000/svg";
  const KINDS = ["report", "error", "trip", "quarantine", "refused", "reload", "restored",
                 "action", "dashboard"];
  const MAX_LOG_ROWS = 1000;
  const state = {
    summary: null, world: null, errors: [], log: [], logSeq: 0,
    entity: null, errorId: null, drawn: {},
    version: { kind: null, key: null, revisions: [], a: null, b: null },
  };

  // -- small tools ------------------------------------------------------------------------

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, String(v));
    }
    return node;
  }

  function fill(tbody, rows) { tbody.replaceChildren(...rows); }

  function changed(name, value) {
    const text = JSON.stringify(value);
    if (state.drawn[name] === text) return false;
    state.drawn[name] = text;
    return true;
  }

  function num(n) { return (n ?? 0).toLocaleString("en-US"); }
  function ms(n) {
    if (!n) return "0";
    return n >= 100 ? n.toFixed(0) : n >= 1 ? n.toFixed(2) : n.toFixed(3);
  }
  function bytes(n) {
    if (!n) return "0";
    const units = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  }
  function pct(x) { return (100 * (x || 0)).toFixed(x >= 0.1 ? 0 : 1) + "%"; }
  function when(s) {
    if (!s) return "";
    const d = new Date(s * 1000);
    return d.toLocaleString("en-GB", { hour12: false });
  }
  function clock(s) {
    return new Date(s * 1000).toLocaleTimeString("en-GB", { hour12: false });
  }

  async function api(path, body) {
    const headers = {};
    if (token) headers.Authorization = "Bearer " + token;
    const options = { headers };
    if (body !== undefined) {
      options.method = "POST";
      headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    const response = await fetch(path, options);
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      const error = new Error((data.error && data.error.message) || response.statusText);
      error.code = data.error && data.error.code;
      throw error;
    }
    return data;
  }

  function say(text, ok) {
    const p = $("action-result");
    p.hidden = false;
    p.textContent = text;
    p.dataset.ok = ok ? "yes" : "no";
  }

  async function act(path, body, what) {
    try {
      const result = await api(path, body);
      say(what + ": " + (result.message || "done"), true);
      return result;
    } catch (error) {
      say(what + " refused: " + error.message, false);
      return null;
    }
  }

  // -- the stream ---------------------------------------------------------------------------

  function connect() {
    const url = "/api/stream" + (token ? "?token=" + encodeURIComponent(token) : "");
    const source = new EventSource(url);
    const conn = $("conn");
    source.onopen = () => { conn.dataset.state = "live"; conn.textContent = "live"; };
    source.onerror = () => {
      conn.dataset.state = "down";
      conn.textContent = "reconnecting…";
    };
    source.addEventListener("summary", (e) => onSummary(JSON.parse(e.data)));
    source.addEventListener("log", (e) => onLog(JSON.parse(e.data)));
    source.addEventListener("world", (e) => { state.world = JSON.parse(e.data); drawWorld(); });
    source.addEventListener("errors", (e) => { state.errors = JSON.parse(e.data); drawErrors(); });
  }

  function onSummary(summary) {
    const first = state.summary === null;
    state.summary = summary;
    $("tick").textContent = "tick " + num(summary.tick);
    $("tps").textContent = summary.health.tps ? summary.health.tps.toFixed(1) + " ticks/s" : "";
    $("where").textContent = summary.mods_dir || "";
    drawMods();
    drawCost();
    drawHealth();
    drawQueues();
    drawWorkers();
    drawShards();
    drawLogFilters();
    if (first) loadKeys();
  }

  // -- mods ---------------------------------------------------------------------------------

  const STATUS_TEXT = { running: "running", quarantined: "quarantined", failed: "failed to load" };

  function drawMods() {
    const mods = state.summary.mods;
    if (!changed("mods", mods)) return;
    fill($("mods").tBodies[0], mods.map((m) => {
      const q = m.quarantine;
      const why = el("td", { class: "why" });
      if (q) {
        why.append(el("span", { class: "reason", text: q.reason }));
        if (q.where) why.append(" ", el("code", { text: q.where }));
      } else if (m.error) {
        why.append(el("span", { class: "reason", text: m.error }));
      }
      const status = el("td", {},
        el("span", { class: "badge " + m.status, text: STATUS_TEXT[m.status] || m.status }));
      if (m.change_refused) status.append(" ", el("span", { class: "badge refused",
        text: "change refused", title: "the last change was refused; the previous version runs on" }));
      const buttons = el("td", { class: "actions" });
      if (q && q.liftable) buttons.append(el("button", { "data-action": "lift",
        onclick: () => act("/api/mods/" + encodeURIComponent(m.id) + "/lift", {}, "lift " + m.id),
        text: "lift quarantine" }));
      if (m.reloadable) buttons.append(el("button", { "data-action": "reload",
        onclick: () => act("/api/mods/" + encodeURIComponent(m.id) + "/reload", {}, "reload " + m.id),
        text: "reload" }));
      if (m.status === "running") buttons.append(el("button", { "data-action": "quarantine",
        class: "quiet",
        onclick: () => act("/api/mods/" + encodeURIComponent(m.id) + "/quarantine", {},
                           "quarantine " + m.id),
        text: "quarantine" }));
      return el("tr", { "data-mod": m.id, "data-status": m.status },
        el("td", { class: "mod" }, m.id),
        el("td", { class: "muted", title: m.hash || "" }, m.version || "–"),
        status, why, buttons);
    }));
  }

  // -- cost -----------------------------------------------------------------------------------

  function drawCost() {
    const rows = state.summary.cost;
    fill($("cost").tBodies[0], rows.map((r) => {
      const share = Math.min(1, r.budget_share || 0);
      const bar = el("span", { class: "bar" });
      bar.style.width = (share * 100).toFixed(1) + "%";
      return el("tr", { "data-mod": r.mod },
        el("td", { class: "mod" }, r.mod),
        el("td", {}, ms(r.ms_per_tick)),
        el("td", { class: "share" }, el("span", { class: "track" }, bar), pct(r.budget_share)),
        el("td", {}, r.calls_per_tick.toFixed(1)),
        el("td", {}, num(Math.round(r.steps_per_tick))),
        el("td", {}, num(r.steps)),
        el("td", {}, bytes(r.memory_bytes)),
        el("td", {}, bytes(r.memory_peak_bytes)),
        el("td", { class: r.errors ? "bad" : "" }, num(r.errors)),
        el("td", { class: r.trips ? "bad" : "" }, num(r.trips)),
        el("td", { class: r.commands_refused ? "warn" : "" }, num(r.commands_refused)));
    }));
  }

  // -- tick health ----------------------------------------------------------------------------

  function drawHealth() {
    const h = state.summary.health;
    const figures = [["last", ms(h.last_ms) + " ms"], ["p50", ms(h.p50_ms) + " ms"],
      ["p90", ms(h.p90_ms) + " ms"], ["max", ms(h.max_ms) + " ms"],
      ["budget", ms(h.budget_ms) + " ms"],
      ["over budget", num(h.over_budget) + " of " + num(h.ticks)]];
    $("health-figures").replaceChildren(...figures.map(([k, v]) =>
      el("div", { class: "fig" + (k === "over budget" && h.over_budget ? " bad" : "") },
        el("span", { class: "k", text: k + (k.startsWith("p") || k === "max" ? " (1 min)" : "") }),
        el("span", { class: "v", text: v }))));
    const chart = $("health-chart");
    const W = 600, H = 170, left = 34, bottom = 18, top = 6;
    // Scaled to the ticks; the budget line is drawn when it is near them, else named.
    const seen = Math.max(0.001, ...h.series.map((p) => p.max_ms));
    const budgetShown = h.budget_ms <= seen * 4;
    const top_ms = budgetShown ? Math.max(seen, h.budget_ms) * 1.25 : seen * 1.3;
    // The last minutes, or since the first tick when that is shorter (at least a minute).
    const span = Math.min(h.history_s,
      Math.max(60, ...h.series.map((p) => p.ago_s + h.bucket_s)));
    const x = (ago) => left + (W - left - 4) * (1 - ago / span);
    const y = (v) => top + (H - top - bottom) * (1 - Math.min(v, top_ms) / top_ms);
    const parts = [];
    for (const frac of [0, 0.5, 1]) {
      const v = top_ms * frac;
      parts.push(svg("line", { x1: left, x2: W - 4, y1: y(v), y2: y(v), class: "gridline" }));
      parts.push(svg("text", { x: left - 4, y: y(v) + 3, class: "axis", "text-anchor": "end",
        text: ms(v) }));
    }
    const ago = (s) => s >= 60 ? "-" + (s / 60).toFixed(s % 60 ? 1 : 0) + " min" : "-" + s + " s";
    for (const [at, anchor] of [[span, "start"], [span / 2, "middle"], [0, "end"]]) {
      parts.push(svg("text", { x: x(at), y: H - 4, class: "axis", "text-anchor": anchor,
        text: at ? ago(Math.round(at)) : "now" }));
    }
    const line = (key, cls) => {
      const points = h.series.slice().reverse().map((p) =>
        x(p.ago_s).toFixed(1) + "," + y(p[key]).toFixed(1));
      if (points.length === 1) points.push(points[0]);
      return svg("polyline", { points: points.join(" "), class: cls });
    };
    if (h.series.length) { parts.push(line("max_ms", "max")); parts.push(line("mean_ms", "mean")); }
    if (budgetShown) {
      parts.push(svg("line", { x1: left, x2: W - 4, y1: y(h.budget_ms), y2: y(h.budget_ms),
        class: "budget" }));
    } else {
      parts.push(svg("text", { x: W - 6, y: top + 10, class: "axis budget-note",
        "text-anchor": "end", text: "budget " + ms(h.budget_ms) + " ms: far above" }));
    }
    chart.replaceChildren(...parts);
  }

  // -- live log -------------------------------------------------------------------------------

  function drawLogFilters() {
    const select = $("log-mod");
    const ids = state.summary.mods.map((m) => m.id);
    if (!changed("log-mods", ids)) return;
    const value = select.value;
    select.replaceChildren(el("option", { value: "", text: "all" }),
      ...ids.map((id) => el("option", { value: id, text: id })));
    select.value = ids.includes(value) ? value : "";
  }

  function logVisible(entry) {
    const mod = $("log-mod").value, kind = $("log-kind").value;
    return (!mod || entry.mod === mod) && (!kind || entry.kind === kind);
  }

  function logRow(e) {
    const where = e.where ? el("code", { class: "where", text: e.where }) : null;
    const row = el("div", { class: "entry " + e.kind, "data-kind": e.kind,
      "data-mod": e.mod || "", "data-seq": e.seq },
      el("span", { class: "t", title: clock(e.time_s), text: e.tick }),
      el("span", { class: "kind", text: e.kind }),
      el("span", { class: "m", text: e.mod || "" }),
      e.handler ? el("span", { class: "h", text: e.handler }) : null,
      where,
      el("span", { class: "msg", text: e.message, title: e.detail || e.message }));
    if (e.group) {
      row.classList.add("link");
      row.title = "show the error";
      row.addEventListener("click", () => { state.errorId = e.group; drawErrors(); });
    }
    return row;
  }

  function onLog(entries) {
    const fresh = entries.filter((e) => e.seq > state.logSeq);
    if (!fresh.length) return;
    state.logSeq = fresh[fresh.length - 1].seq;
    state.log.push(...fresh);
    if (state.log.length > MAX_LOG_ROWS) state.log.splice(0, state.log.length - MAX_LOG_ROWS);
    if ($("log-pause").checked) return;
    const box = $("log");
    const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 30;
    box.append(...fresh.filter(logVisible).map(logRow));
    while (box.childElementCount > MAX_LOG_ROWS) box.firstElementChild.remove();
    if (atEnd) box.scrollTop = box.scrollHeight;
    $("log-count").textContent = num(state.log.length) + " kept";
    if (fresh.some((e) => e.kind === "reload" || e.kind === "action")) loadKeys();
  }

  function redrawLog() {
    const box = $("log");
    box.replaceChildren(...state.log.filter(logVisible).map(logRow));
    box.scrollTop = box.scrollHeight;
  }

  // -- errors ---------------------------------------------------------------------------------

  function drawErrors() {
    const list = $("error-list");
    const groups = state.errors;
    if (groups.length && !groups.some((g) => g.id === state.errorId)) state.errorId = groups[0].id;
    list.replaceChildren(...groups.slice(0, 30).map((g) => el("li", {
      class: (g.id === state.errorId ? "selected " : "") + g.kind, "data-group": g.id,
      onclick: () => { state.errorId = g.id; drawErrors(); } },
      el("span", { class: "count", text: "×" + num(g.count) }),
      el("span", { class: "m", text: g.mod }),
      el("code", { text: g.where }),
      el("span", { class: "msg", text: g.message }))));
    if (!groups.length) list.replaceChildren(el("li", { class: "muted", text: "no errors" }));
    const g = groups.find((x) => x.id === state.errorId);
    const box = $("error-detail");
    if (!g) { box.replaceChildren(); return; }
    const head = g.kind === "reload"
      ? el("div", { class: "head" }, el("span", { class: "badge refused", text: "load refused" }),
        " mod ", el("b", { text: g.mod }), ": this version was refused; the previous one (if any) runs on")
      : el("div", { class: "head" },
        el("span", { class: "badge " + (g.kind === "trip" ? "quarantined" : "failed"),
          text: g.kind === "trip" ? (g.budget || "budget") + " trip" : g.error_kind }),
        " mod ", el("b", { text: g.mod }), " in ", el("code", { text: g.handler }),
        " defined at ", el("code", { text: g.defined_at }));
    const parts = [
      head,
      el("div", { class: "msg" }, g.where ? el("code", { class: "where", text: g.where }) : null,
        " " + g.message),
      el("div", { class: "muted", text: "×" + num(g.count) + ", ticks " + g.first_tick + "–" +
        g.last_tick + ", last at " + clock(g.last_time_s) }),
    ];
    if (g.source) {
      parts.push(el("pre", { class: "source" }, ...g.source.lines.map((l) =>
        el("span", { class: l.line === g.source.line ? "line hot" : "line" },
          el("span", { class: "n", text: String(l.line).padStart(4) }), " " + l.text + "\n"))));
    }
    if (g.traceback.length) {
      parts.push(el("div", { class: "k", text: "traceback (innermost first)" }));
      parts.push(el("ol", { class: "traceback" },
        ...g.traceback.map((f) => el("li", {}, el("code", { text: f.text })))));
    }
    box.replaceChildren(...parts);
  }

  // -- versions -------------------------------------------------------------------------------

  async function loadKeys() {
    if (state.summary && !state.summary.store) {
      const none = $("versions-none");
      none.hidden = false;
      none.textContent = "no versions store (the game runs without one)";
      return;
    }
    let data;
    try { data = await api("/api/versions"); } catch (error) { return; }
    fill($("version-keys").tBodies[0], data.keys.map((k) => el("tr", {
      "data-key": k.key, "data-kind": k.kind,
      class: k.key === state.version.key && k.kind === state.version.kind ? "selected" : "",
      onclick: () => showKey(k.kind, k.key) },
      el("td", { class: "key", title: k.kind }, k.key),
      el("td", { class: k.current === k.original ? "muted" : "moved",
        title: k.current === k.original ? "the original" : "moved from the original " + k.original },
        k.current),
      el("td", { class: "muted" }, k.revisions))));
    if (state.version.key) showKey(state.version.kind, state.version.key, true);
  }

  async function showKey(kind, key, keep) {
    const v = state.version;
    if (!keep || v.key !== key || v.kind !== kind) {
      v.a = v.b = null;
      $("diff").replaceChildren();
    }
    v.kind = kind; v.key = key;
    for (const tr of $("version-keys").tBodies[0].rows) {
      tr.classList.toggle("selected", tr.dataset.key === key && tr.dataset.kind === kind);
    }
    let data;
    try {
      data = await api("/api/versions/history?kind=" + kind + "&key=" + encodeURIComponent(key));
    } catch (error) { say("versions: " + error.message, false); return; }
    const info = data.info;
    v.revisions = data.revisions;
    if (v.b === null) v.b = info.current;
    if (v.a === null) {
      const older = data.revisions.find((r) => r.rev < v.b && r.outcome === "ok");
      v.a = older ? older.rev : info.original;
    }
    $("version-title").textContent = kind + " " + key + ": current " + info.current +
      ", original " + info.original + ", " + info.revisions + " kept";
    fill($("version-history").tBodies[0], data.revisions.map((r) => {
      const radio = (side) => el("input", { type: "radio", name: "side-" + side,
        checked: v[side] === r.rev, onchange: () => { v[side] = r.rev; } });
      const cells = [
        el("td", { class: "rev" }, String(r.rev) + (r.rev === info.current ? " ●" : "")),
        el("td", { class: "sides" }, radio("a"), radio("b")),
        el("td", { class: r.outcome === "ok" ? "" : "bad", title: r.error || "" }, r.outcome),
        el("td", { class: "muted", title: when(r.recorded_at_s) }, clock(r.recorded_at_s)),
        el("td", {}, r.author || "–"), el("td", {}, r.role || "–"),
        el("td", { class: "muted" }, r.trace_id || "–"),
      ];
      const buttons = el("td", {});
      if (r.outcome === "ok" && r.rev !== info.current) {
        buttons.append(el("button", { "data-action": "rollback", "data-rev": r.rev,
          text: "roll back", title: "make revision " + r.rev + " current",
          onclick: async () => {
            await act("/api/versions/rollback", { kind, key, rev: r.rev },
                      "roll back " + key + " to " + r.rev);
            v.b = null; v.a = null;
            loadKeys();
          } }));
      }
      cells.push(buttons);
      return el("tr", { "data-rev": r.rev, class: r.rev === info.current ? "current" : "" },
        ...cells);
    }));
    $("version-diff").disabled = false;
    $("version-reset").disabled = info.current === info.original;
  }

  async function showDiff() {
    const v = state.version;
    if (!v.key) return;
    let data;
    try {
      data = await api("/api/versions/diff?kind=" + v.kind + "&key=" +
        encodeURIComponent(v.key) + "&a=" + v.a + "&b=" + v.b);
    } catch (error) { say("diff: " + error.message, false); return; }
    const lines = data.diff ? data.diff.split("\n") : ["(the same)"];
    $("diff").replaceChildren(...lines.map((l) => el("span", {
      class: l.startsWith("@@") ? "hunk" : l.startsWith("+") ? "add" : l.startsWith("-") ? "del" : "",
      text: l + "\n" })));
  }

  async function resetKey() {
    const v = state.version;
    if (!v.key) return;
    await act("/api/versions/reset", { kind: v.kind, key: v.key }, "reset " + v.key);
    v.a = v.b = null;
    loadKeys();
  }

  // -- world ----------------------------------------------------------------------------------

  const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2",
                   "#db2777", "#65a30d"];
  function ownerColour(owner) {
    let h = 0;
    for (const c of owner || "host") h = (h * 31 + c.charCodeAt(0)) >>> 0;
    return PALETTE[h % PALETTE.length];
  }
  function entityColour(e) {
    const [r, g, b] = e.color || [1, 1, 1];
    if (r > 0.95 && g > 0.95 && b > 0.95) return ownerColour(e.owner);
    return "rgb(" + [r, g, b].map((c) => Math.round(c * 255)).join(",") + ")";
  }

  function drawWorld() {
    const w = state.world;
    if (!w || !w.entities) return;
    const map = $("world-map");
    // Zoomed to where the entities are (centred on the origin), never past the bounds.
    const far = Math.max(0, ...w.entities.map((e) => Math.max(Math.abs(e.x), Math.abs(e.z))));
    const bound = Math.min(w.bound, Math.max(w.bound / 20, far * 1.25, 1));
    map.setAttribute("viewBox", [-bound, -bound, 2 * bound, 2 * bound].join(" "));
    const parts = [svg("rect", { x: -bound, y: -bound, width: 2 * bound, height: 2 * bound,
      class: "floor" })];
    for (let i = -4; i <= 4; i++) {
      const v = (bound * i) / 5;
      parts.push(svg("line", { x1: v, x2: v, y1: -bound, y2: bound, class: i ? "grid" : "axis0" }));
      parts.push(svg("line", { y1: v, y2: v, x1: -bound, x2: bound, class: i ? "grid" : "axis0" }));
    }
    const unit = bound / 50;
    const labels = w.entities.length <= 40;
    for (const e of w.entities) {
      const r = Math.max(0.9 * unit, Math.min(4 * unit, e.scale * 1.2 * unit));
      const cx = e.x, cy = -e.z;
      const dot = svg("circle", { cx, cy, r, fill: entityColour(e),
        class: "entity" + (state.entity === e.name ? " selected" : ""), "data-name": e.name,
        onclick: () => { state.entity = e.name; drawWorld(); } });
      dot.append(svg("title", { text: e.name + " (" + e.prefab + ")" }));
      parts.push(dot);
      if (labels) parts.push(svg("text", { x: cx + r + 0.6 * unit, y: cy + 1.2 * unit,
        class: "label", "font-size": 3.2 * unit, text: e.name }));
    }
    map.replaceChildren(...parts);
    $("world-count").textContent = num(w.count) + " entities" +
      (w.shown < w.count ? ", " + num(w.shown) + " shown" : "") + ", tick " + num(w.tick) +
      ", x and z ±" + num(Math.round(bound)) + " of ±" + num(w.bound);
    const chosen = w.entities.find((e) => e.name === state.entity);
    $("inspector").textContent = chosen
      ? Object.entries(chosen).map(([k, v]) => k + ": " + JSON.stringify(v)).join("\n")
      : state.entity ? state.entity + " is gone" : "click an entity";
  }

  // -- events and queues ----------------------------------------------------------------------

  function drawQueues() {
    const q = state.summary.queues;
    const m = q.last_minute;
    const figures = [["ticks", m.ticks], ["commands", m.applied + m.refused],
      ["applied", m.applied], ["refused", m.refused], ["events", m.events],
      ["failures", m.failures], ["pending", q.world.pending + " / " + num(q.world.max_pending)],
      ["entities", num(q.world.entities) + " / " + num(q.world.max_entities)]];
    $("queue-figures").replaceChildren(...figures.map(([k, v], i) => el("div", {
      class: "fig" + (k === "refused" && v ? " warn" : k === "failures" && v ? " bad" : "") },
      el("span", { class: "k", text: k + (i < 6 ? " (1 min)" : "") }),
      el("span", { class: "v", text: typeof v === "number" ? num(v) : v }))));
    const reasons = Object.entries(q.refused_by_reason);
    fill($("refused-reasons").tBodies[0], reasons.length ? reasons.map(([reason, n]) =>
      el("tr", {}, el("td", {}, el("code", { text: reason })), el("td", { class: "num" }, num(n)),
        el("td", { class: "muted" }, (q.reasons || {})[reason] || ""))) :
      [el("tr", {}, el("td", { class: "muted", text: "none refused" }))]);
    fill($("refused").tBodies[0], q.refused.slice(0, 8).map((r) => el("tr", {},
      el("td", {}, r.tick), el("td", {}, r.mod || "host"), el("td", {}, r.command),
      el("td", {}, el("code", { text: r.reason })), el("td", { class: "msg" }, r.message))));
    fill($("mod-queues").tBodies[0], q.mods.map((x) => el("tr", {},
      el("td", { class: "mod" }, x.mod), el("td", {}, num(x.queued_events)),
      el("td", { class: x.events_dropped ? "warn" : "" }, num(x.events_dropped)),
      el("td", {}, num(x.tasks)), el("td", {}, num(x.timers)), el("td", {}, num(x.handlers)),
      el("td", {}, num(x.commands_applied)),
      el("td", { class: x.commands_refused ? "warn" : "" }, num(x.commands_refused)))));
    fill($("events").tBodies[0], q.events.slice(0, 6).map((e) => el("tr", {},
      el("td", {}, e.tick), el("td", {}, el("code", { text: e.name })),
      el("td", {}, e.source || "game"), el("td", { class: "data", title: e.data }, e.data))));
  }

  // -- workers --------------------------------------------------------------------------------

  function drawWorkers() {
    const w = state.summary.workers;
    const none = $("workers-none");
    if (!w.isolated) {
      none.textContent = "the mods run in this process: no worker processes (moonbox dev --isolate runs each in one)";
      $("workers").hidden = true;
      return;
    }
    $("workers").hidden = false;
    none.textContent = w.spares.length ? "spare workers booted: " + w.spares.join(", ") : "";
    fill($("workers").tBodies[0], w.workers.map((x) => el("tr", {},
      el("td", {}, x.pid === null ? "down" : x.pid), el("td", {}, bytes(x.rss_bytes)),
      el("td", {}, bytes(x.vms_bytes)),
      el("td", {}, x.memory_limit_bytes ? bytes(x.memory_limit_bytes) : "none"),
      el("td", {}, x.cpu_percent.toFixed(0) + "%"),
      el("td", {}, (x.cpu_user_s + x.cpu_system_s).toFixed(2) + " s"),
      el("td", { class: x.respawns ? "warn" : "" }, num(x.respawns)),
      el("td", {}, num(x.restores)),
      el("td", { class: "mods" }, x.mods.join(", ") || "–"))));
  }

  // -- shards ---------------------------------------------------------------------------------

  function drawShards() {
    const s = state.summary.shards;
    const none = $("shards-none");
    if (!s || !s.sharded) {
      none.textContent = "not a sharded game: no shards (moonbox.cluster splits a game over them)";
      $("shards").hidden = true;
      $("shards-figures").textContent = "";
      return;
    }
    $("shards").hidden = false;
    const cp = s.last_checkpoint;
    none.textContent = "";
    $("shards-figures").textContent = [
      s.backend + " backend, tick " + num(s.tick),
      "skew " + ms(s.skew_ms) + " ms (max " + ms(s.skew_max_ms) + ")",
      "coordinator " + ms(s.overhead_ms_per_shard_per_tick) + " ms per shard per tick",
      cp ? "last checkpoint: tick " + num(cp.tick) + ", " + bytes(cp.bytes) + ", " + ms(cp.ms) + " ms"
        : "no checkpoints",
      s.recoveries.length ? "recoveries: " + s.recoveries.length : "",
    ].filter((x) => x).join(" · ");
    fill($("shards").tBodies[0], s.shards.map((x) => el("tr", { class: x.status === "lost" ? "bad" : "" },
      el("td", {}, x.shard), el("td", {}, x.status === "lost" ? "lost" : x.pid),
      el("td", {}, num(x.mods)), el("td", {}, x.status === "lost" ? "–" : num(x.tick)),
      el("td", {}, x.status === "lost" ? "–" : ms(x.ms_per_tick)),
      el("td", {}, x.status === "lost" ? "–" : ms(x.ms_max)),
      el("td", {}, x.status === "lost" ? "–" : ms(x.cpu_ms_per_tick)),
      el("td", { class: x.restarts ? "warn" : "" }, num(x.restarts)),
      el("td", {}, x.restored_from === null || x.restored_from === undefined ? "–" : num(x.restored_from)),
      el("td", { class: "mods" }, x.mod_ids.join(", ") || "–"))));
  }

  // -- start ----------------------------------------------------------------------------------

  $("log-kind").append(...KINDS.map((k) => el("option", { value: k, text: k })));
  $("log-mod").addEventListener("change", redrawLog);
  $("log-kind").addEventListener("change", redrawLog);
  $("log-pause").addEventListener("change", () => { if (!$("log-pause").checked) redrawLog(); });
  $("version-diff").addEventListener("click", showDiff);
  $("version-reset").addEventListener("click", resetKey);
  $("versions-refresh").addEventListener("click", loadKeys);
  connect();
})();
