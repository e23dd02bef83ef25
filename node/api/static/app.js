// tsched dashboard: reads the node's own HTTP API (same origin) and re-renders every few
// seconds. No framework and no build step; every value from the API goes into the page as
// text (textContent), never as HTML.
"use strict";
(() => {
  const REFRESH_MS = 2000;
  const CLUSTER_REFRESH_MS = 10000;
  const LIST_LIMIT = 50;
  const SEARCH_PAGES_MAX = 5;   // bounded pages a task search follows per refresh
  const STATES = ["pending", "running", "completed", "cancelled", "dead_letter", "discarded"];
  // what the task filter offers: `retrying` is a view of pending (failures waiting to retry)
  const FILTER_STATES = ["pending", "retrying", "running", "completed", "cancelled", "dead_letter", "discarded"];
  // The API token lives for this tab only (sessionStorage): closing it forgets the token.
  const TOKEN_KEY = "tsched.token";
  const $ = (id) => document.getElementById(id);

  const view = {
    token: sessionStorage.getItem(TOKEN_KEY) || "",
    minSeq: 0,            // after a write, reads wait for it (read-your-writes)
    shardSeqs: {},        // the same per shard, in a cluster with several shards
    tab: "tasks",
    audit: { actor: "", action: "", target: "" },
    selected: null,       // task id shown in the detail pane
    workflow: null,       // workflow id shown in the workflows tab's detail pane
    search: {},
    timer: null,
    refreshes: 0,
    cluster: null,        // the last /v1/cluster answer, and when it came
    clusterAt: 0,
  };

  // --- DOM and formatting helpers ------------------------------------------------------------

  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(el.dataset, v);
      else el.setAttribute(k, v);
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined) continue;
      el.append(kid instanceof Node ? kid : String(kid));
    }
    return el;
  }

  function fill(tbody, rows, columns, emptyText) {
    tbody.replaceChildren(...(rows.length ? rows
      : [h("tr", { class: "empty" }, h("td", { colspan: columns }, emptyText))]));
  }

  function ago(iso) {
    if (!iso) return "—";
    const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
    const a = Math.abs(s);
    const text = a < 60 ? `${a}s` : a < 3600 ? `${Math.round(a / 60)}m`
      : a < 86400 ? `${Math.round(a / 3600)}h` : `${Math.round(a / 86400)}d`;
    return s > 0 ? `in ${text}` : `${text} ago`;
  }

  const when = (iso) => h("span", { title: iso || "" }, ago(iso));
  const TERMINAL = new Set(["completed", "cancelled", "dead_letter", "discarded"]);
  // A task that will not run again has no run time ahead: a future run_at reads "—".
  const runAt = (t) => (TERMINAL.has(t.state) && Date.parse(t.run_at) > Date.now()
    ? h("span", { title: `${t.run_at || ""} (not run: ${t.state.replace("_", " ")})` }, "—")
    : when(t.run_at));
  const badge = (state) => h("span", { class: `badge ${state}` }, state.replace("_", " "));
  const shortId = (id) => h("code", { title: id }, id.length > 14 ? `${id.slice(0, 12)}…` : id);

  function bar(percent) {
    // Set through the CSSOM: the page's CSP refuses inline style attributes.
    const el = h("div", { class: "fill" });
    el.style.width = `${percent}%`;
    return el;
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
    if (seconds < 120) return `${seconds.toFixed(1)} s`;
    return `${Math.round(seconds / 60)} min`;
  }

  // --- API -----------------------------------------------------------------------------------

  class ApiFailure extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  async function api(method, path, { body, params, fresh } = {}) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v !== "" && v != null) q.set(k, v);
    const pairs = Object.entries(view.shardSeqs).map(([s, n]) => `${s}:${n}`);
    if (fresh && pairs.length) q.set("min_seq", pairs.join(","));
    else if (fresh && view.minSeq) q.set("min_seq", view.minSeq);
    const headers = { Accept: "application/json" };
    if (view.token) headers.Authorization = `Bearer ${view.token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const url = q.toString() ? `${path}?${q}` : path;
    const r = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    let data = null;
    try { data = await r.json(); } catch (_) { data = null; }
    if (!r.ok) {
      const err = (data && data.error) || {};
      throw new ApiFailure(r.status, err.code || "http_" + r.status, err.message || r.statusText);
    }
    if (method !== "GET" && data && Number.isInteger(data.applied_seq)) {
      if (Number.isInteger(data.shard)) {   // sequences of different shards are unrelated
        view.shardSeqs[data.shard] = Math.max(view.shardSeqs[data.shard] || 0, data.applied_seq);
      } else {
        view.minSeq = Math.max(view.minSeq, data.applied_seq);
      }
    }
    return data;
  }

  function banner(text) {
    const el = $("banner");
    el.textContent = text || "";
    el.hidden = !text;
  }

  // --- cluster and queues ----------------------------------------------------------------------

  function renderCluster(c) {
    $("leader").textContent = c.leader || "none";
    $("term").textContent = c.term ?? "—";
    const nodes = c.nodes || [];
    const top = Math.max(0, ...nodes.map((n) => n.applied_seq || 0));
    fill($("nodes").tBodies[0], nodes.map((n) => h("tr", { dataset: { node: n.id } },
      h("td", null, h("b", null, n.id)),
      h("td", { class: n.reachable === false ? "unreachable" : `role-${n.role}` },
        n.reachable === false ? "unreachable" : n.role),
      h("td", null, h("code", null, n.http || "")),
      h("td", { class: "num" }, n.commit_index ?? "—"),
      h("td", { class: "num" }, n.applied_seq ?? "—"),
      h("td", { class: "num", title: "batches behind the most advanced node" },
        n.applied_seq == null ? "—" : top - n.applied_seq),
      h("td", null, n.digest ? h("code", { title: n.digest }, n.digest.slice(0, 10)) : "—"),
    )), 7, "no nodes");
  }

  function renderShards(c, stats) {
    const shards = c.shards || [];
    $("shards").hidden = shards.length === 0;
    if (!shards.length) return;
    const counts = (stats && stats.by_shard) || {};
    fill($("shards").tBodies[0], shards.map((s) => {
      const n = counts[String(s.shard)] || {};
      const replicas = s.nodes || [];
      const up = replicas.filter((r) => r.reachable !== false).length;
      return h("tr", { dataset: { shard: s.shard } },
        h("td", null, h("b", null, s.shard)),
        h("td", null, s.leader || "none"),
        h("td", { class: "num" }, s.term ?? "—"),
        h("td", null, replicas.map((r) => r.id).join(" ")),
        h("td", { class: up * 2 <= replicas.length ? "bad" : null }, `${up} of ${replicas.length}`),
        h("td", { class: "num" }, n.pending ?? 0),
        h("td", { class: "num" }, n.running ?? 0),
        h("td", { class: "num" }, n.completed ?? 0));
    }), 8, "no shards");
  }

  function renderQueues(stats, tenants) {
    const byState = stats.by_state || {};
    $("applied-seq").textContent = stats.applied_seq ?? "—";   // this node's
    $("lag").textContent = duration(stats.oldest_claimable_age_s);
    // Hidden until the first stats are in: no "0" shown while dead letters exist.
    $("dlq-count").textContent = byState.dead_letter || 0;
    $("dlq-count").hidden = false;
    $("states").replaceChildren(...STATES.map((s) => h("div", { class: "state", dataset: { state: s } },
      h("div", { class: "n" }, byState[s] || 0), h("div", { class: "k" }, s.replace("_", " ")))));

    const byPrio = stats.by_priority || {};
    const most = Math.max(1, ...Object.values(byPrio));
    const bars = [];
    for (let p = 0; p <= 10; p++) {
      const n = byPrio[p] || 0;
      bars.push(h("span", { class: "label" }, p),
        h("div", { class: "track" }, bar((100 * n) / most)),
        h("span", { class: "count" }, n));
    }
    $("priorities").replaceChildren(...bars);

    const settings = Object.fromEntries((tenants.tenants || []).map((t) => [t.tenant, t]));
    const names = [...new Set([...Object.keys(stats.by_tenant || {}), ...Object.keys(settings)])].sort();
    fill($("tenants").tBodies[0], names.map((name) => {
      const counts = (stats.by_tenant || {})[name] || {};
      const t = settings[name] || {};
      return h("tr", { dataset: { tenant: name } },
        h("td", null, name),
        h("td", { class: "num" }, counts.pending ?? t.pending ?? 0),
        h("td", { class: "num" }, counts.running ?? t.running ?? 0),
        h("td", { class: "num" }, t.max_running ? t.max_running : "none"),
        h("td", { class: "num" }, t.weight ?? 1));
    }), 5, "no tenants yet");
  }

  function renderLimits(answer) {
    fill($("limits").tBodies[0], (answer.limits || []).map((l) => {
      const budget = [l.rate ? `${l.rate} per ${l.per_s} s` : null,
        l.concurrency ? `${l.concurrency} at once` : null].filter(Boolean).join(", ");
      const top = (l.partitions || [])[0];
      return h("tr", { dataset: { limit: l.name } },
        h("td", null, l.name),
        h("td", null, budget),
        h("td", null, l.partition_by || "all"),
        h("td", { class: "num" }, l.in_use ?? 0),
        h("td", { class: "num" }, l.in_window ?? 0),
        h("td", { class: l.held ? "num bad" : "num" }, l.held ?? 0),
        h("td", null, top ? `${top.partition || "(none)"}: ${top.held} held` : "—"));
    }), 7, "no limits declared");
  }

  function renderPauses(answer) {
    // paused queues (DESIGN 15.1): "all" where a selector leaves a part open
    fill($("pauses").tBodies[0], (answer.pauses || []).map((p) => h("tr", null,
      h("td", null, p.task_type || "all"), h("td", null, p.tenant || "all"),
      h("td", null, when(p.paused_at)), h("td", null, p.actor || "—"),
      h("td", null, p.reason || "—"))), 5, "nothing is paused");
  }

  function renderFacts(cluster, stats) {
    const nodes = cluster.nodes || [];
    const up = nodes.filter((n) => n.reachable !== false).length;
    const digests = new Set(nodes.filter((n) => n.digest).map((n) => `${n.applied_seq}/${n.digest}`));
    const seqs = new Set(nodes.filter((n) => n.digest).map((n) => n.applied_seq));
    // Digests are comparable only between nodes at the same applied seq.
    const agree = seqs.size > 1 ? "catching up" : digests.size <= 1 ? "yes" : "NO";
    const fact = (label, value, bad) => h("div", null, h("dt", null, label),
      h("dd", { class: bad ? "bad" : null }, value));
    $("facts").replaceChildren(
      fact("nodes reachable", `${up} of ${nodes.length}`, up * 2 <= nodes.length),
      fact("replicas agree", agree, agree === "NO"),
      fact("oldest due task waiting", duration(stats.oldest_claimable_age_s)),
      fact("workers waiting", stats.waiting_claims ?? "—"),
      fact("schedules", stats.schedules ?? "—"),
      fact("dead letters", (stats.by_state || {}).dead_letter || 0, (stats.by_state || {}).dead_letter > 0));
  }

  // --- tasks -----------------------------------------------------------------------------------

  async function loadTasks() {
    const s = view.search;
    let tasks;
    if (s.id) {
      try {   // a task submitted anywhere a moment ago is found, as in its detail
        tasks = [await readTask(s.id)];
      } catch (e) {
        if (e.status !== 404) throw e;
        tasks = [];
      }
      view.selected = tasks.length ? tasks[0].task_id : view.selected;
    } else {
      tasks = await searchTasks(s);
    }
    fill($("task-list").tBodies[0], tasks.map((t) => h("tr", {
      class: `clickable${t.task_id === view.selected ? " selected" : ""}`,
      dataset: { taskId: t.task_id },
      onclick: () => { view.selected = t.task_id; refreshSoon(); },
    },
    h("td", null, shortId(t.task_id)), h("td", null, t.tenant), h("td", null, t.task_type),
    h("td", null, badge(t.status || t.state)), h("td", { class: "num" }, t.priority),
    h("td", { class: "num" }, t.attempt), h("td", { class: "run-at" }, runAt(t)))), 7, "no matching tasks");
    if (view.selected) await loadDetail(view.selected);
  }

  // A page examines a bounded number of tasks (DESIGN 7): one that stops early carries a
  // cursor with fewer tasks, even none. Follow it a few pages to fill the list; what is
  // left unsearched is said, never shown as "no matching tasks".
  async function searchTasks(s) {
    let tasks = [], cursor = null, pages = 0;
    do {
      const page = await api("GET", "/v1/tasks", { fresh: true, params: {
        state: s.state, tenant: s.tenant, task_type: s.type, limit: LIST_LIMIT - tasks.length,
        cursor: cursor || undefined } });
      tasks = tasks.concat(page.tasks);
      cursor = page.next_cursor;
      pages += 1;
    } while (cursor && tasks.length < LIST_LIMIT && pages < SEARCH_PAGES_MAX);
    $("task-list-note").textContent = !cursor ? ""
      : tasks.length >= LIST_LIMIT ? `newest ${LIST_LIMIT} shown`
      : `${tasks.length} found among the newest tasks; older ones not searched yet ` +
        "(narrow the search by type or tenant, or use tsctl list)";
    return tasks;
  }

  // An attempt's error: one line, and its traceback folded under it (DESIGN 14.1).
  function errorCell(a) {
    const d = a.error_detail;
    if (!d) return a.error || "";
    return h("details", null, h("summary", null, a.error || d.type),
      h("pre", { class: "traceback" }, d.traceback || "(no traceback)"));
  }

  function heldBy(l) {
    // a pending task a spent keyed limit holds (DESIGN 15): which budget, until when
    const part = l.partition ? ` (${l.partition})` : "";
    return [`limit ${l.limit}${part}, `, l.until ? ["until ", when(l.until)] : "until a running task of it ends"];
  }

  function progressOf(p) {
    // a running task's last reported progress (a heartbeat's, DESIGN 9)
    const pct = Math.round(p.fraction * 100);
    return h("span", { id: "task-progress", title: p.at ? `reported ${p.at}` : "" },
      h("progress", { max: 1000, value: Math.round(p.fraction * 1000) }), ` ${pct}%`,
      p.message ? ` ${p.message}` : "");
  }

  async function readTask(id) {
    const path = `/v1/tasks/${encodeURIComponent(id)}`;
    try {   // through the leader: it has every acknowledged submit, and it alone can tell
            // whether any worker asks for the type
      return await api("GET", path, { params: { consistency: "linearizable" } });
    } catch (e) {
      if (e.status !== 503 && e.status !== 504) throw e;
      return await api("GET", path, { fresh: true });   // no leader now: this node's copy
    }
  }

  async function loadDetail(id) {
    let t;
    try {
      t = await readTask(id);
    } catch (e) {
      if (e.status !== 404) throw e;
      view.selected = null;
      $("task-detail").replaceChildren(h("p", { class: "muted" }, `task ${id} is gone (evicted or discarded)`));
      return;
    }
    const row = (k, v) => [h("dt", null, k), h("dd", null, v ?? "—")];
    const wide = (k, v) => [h("dt", { class: "wide" }, k), h("dd", null, v ?? "—")];
    const json = (v) => h("pre", null, JSON.stringify(v, null, 1));
    const attempts = (t.attempts || []).map((a) => h("tr", null,
      h("td", { class: "num" }, a.attempt), h("td", null, a.worker_id), h("td", { class: "num" }, a.fencing_token),
      h("td", null, when(a.started_at)), h("td", null, a.outcome || "running"),
      h("td", { class: "attempt-error", title: a.error || "" }, errorCell(a))));
    $("task-detail").replaceChildren(
      h("h3", null, "Task ", h("code", null, t.task_id)),
      h("dl", null,
        row("state", badge(t.status || t.state)), row("tenant", t.tenant),
        row("next retry", t.next_retry_at ? when(t.next_retry_at) : null),
        t.limited_by ? row("held by", heldBy(t.limited_by)) : [],
        t.paused ? row("paused", [`${t.paused.task_type || "all types"} / ${t.paused.tenant || "all tenants"} since `,
          when(t.paused.paused_at), t.paused.reason ? `: ${t.paused.reason}` : ""]) : [],
        t.progress ? wide("progress", progressOf(t.progress)) : [],
        t.unclaimed_type ? wide("no worker", h("span", { id: "unclaimed-hint" }, t.unclaimed_type.message)) : [],
        row("type", t.task_type), row("priority", t.priority),
        row("attempt", `${t.attempt} of ${t.max_retries + 1}`), row("run at", runAt(t)),
        row("worker", t.worker_id), row("token", t.fencing_token),
        row("lease until", t.lease_expires_at ? when(t.lease_expires_at) : null),
        row("cancelling", t.cancel_requested ? "yes" : "no"),
        row("schedule", t.schedule_id), row("created", when(t.created_at)),
        wide("execution id", h("code", null, t.execution_id || "—")),
        wide("last error", t.last_error), wide("payload", json(t.payload)), wide("result", json(t.result))),
      h("h3", null, "Attempts"),
      h("table", { class: "grid", id: "attempts" },
        h("thead", null, h("tr", null, h("th", { class: "num" }, "#"), h("th", null, "worker"),
          h("th", { class: "num" }, "token"), h("th", null, "started"), h("th", null, "outcome"),
          h("th", null, "error"))),
        h("tbody", null, attempts.length ? attempts
          : h("tr", { class: "empty" }, h("td", { colspan: 6 }, "not run yet")))));
  }

  // --- dead letters ------------------------------------------------------------------------------

  async function act(button, action, id) {
    button.disabled = true;
    try {
      await api("POST", `/v1/tasks/${encodeURIComponent(id)}/${action}`, { body: {} });
      banner("");
    } catch (e) {
      banner(`${action} ${id} failed: ${e.code}: ${e.message}`);
    }
    refreshSoon();
  }

  // Discarding is for good: the first click arms the button, the second one acts. Armed
  // ids outlive the list's refresh (which draws new buttons) until they time out.
  const DISCARD_ARMED_MS = 4000;
  const armedDiscards = new Map();   // task id -> when its arming ends (ms)

  function discardButton(id) {
    const b = h("button", { type: "button", dataset: { action: "discard", taskId: id } });
    const show = () => {
      const armed = (armedDiscards.get(id) || 0) > Date.now();
      if (!armed) armedDiscards.delete(id);
      b.textContent = armed ? "confirm discard" : "discard";
      b.className = armed ? "danger" : "ghost";
      return armed;
    };
    b.addEventListener("click", () => {
      if (show()) { armedDiscards.delete(id); act(b, "discard", id); return; }
      armedDiscards.set(id, Date.now() + DISCARD_ARMED_MS);
      show();
      setTimeout(show, DISCARD_ARMED_MS + 10);
    });
    show();
    return b;
  }

  async function loadDeadLetters() {
    const page = await api("GET", "/v1/tasks", { fresh: true, params: { state: "dead_letter", limit: 100 } });
    $("dlq-note").textContent = page.next_cursor ? "newest 100 shown" : "";
    fill($("dlq").tBodies[0], page.tasks.map((t) => h("tr", { dataset: { taskId: t.task_id } },
      h("td", null, shortId(t.task_id)), h("td", null, t.tenant), h("td", null, t.task_type),
      h("td", { class: "num" }, t.attempt), h("td", { title: t.last_error || "" }, t.last_error || ""),
      h("td", null, when(t.completed_at)),
      h("td", null,
        h("button", { type: "button", dataset: { action: "replay", taskId: t.task_id },
          onclick: (ev) => act(ev.currentTarget, "replay", t.task_id) }, "replay"),
        discardButton(t.task_id)))), 7, "the dead-letter queue is empty");
  }

  // --- schedules ---------------------------------------------------------------------------------

  const PREVIEW_FIRES = 3;
  const previews = new Map();   // schedule key -> next fires in its zone (or an error text)

  async function nextFires(s) {
    // Asked once per (schedule, next fire): the answer changes only when the schedule fires.
    const key = `${s.tenant}/${s.schedule_id}/${s.cron}/${s.timezone}/${s.next_fire_at}`;
    if (!previews.has(key)) {
      const params = { cron: s.cron, timezone: s.timezone, count: PREVIEW_FIRES,
        schedule_id: s.schedule_id, from: s.next_fire_at ? Date.parse(s.next_fire_at) / 1000 - 0.001 : "" };
      try {
        previews.set(key, (await api("GET", "/v1/cron/preview", { params })).fires);
      } catch (e) {
        previews.set(key, []);
      }
      if (previews.size > 500) previews.delete(previews.keys().next().value);
    }
    return previews.get(key);
  }

  function localTime(rfc3339) {
    // "2026-12-01T03:00:00+01:00" -> "12-01 03:00 +01:00" (the schedule's own wall clock)
    const m = /^\d{4}-(\d\d-\d\d)T(\d\d:\d\d)(?::\d\d(?:\.\d+)?)?(Z|[+-]\d\d:\d\d)$/.exec(rfc3339);
    return m ? `${m[1]} ${m[2]} ${m[3] === "Z" ? "UTC" : m[3]}` : rfc3339;
  }

  async function loadSchedules() {
    const page = await api("GET", "/v1/schedules", { fresh: true, params: { limit: 100 } });
    $("schedules-note").textContent = page.next_cursor ? "first 100 shown" : "";
    const fires = await Promise.all(page.schedules.map((s) => s.paused || !s.next_fire_at ? [] : nextFires(s)));
    fill($("schedules").tBodies[0], page.schedules.map((s, i) => h("tr", { dataset: { scheduleId: s.schedule_id } },
      h("td", null, h("b", null, s.schedule_id), s.paused ? h("span", { class: "pill" }, "paused") : null),
      h("td", null, s.tenant), h("td", null, h("code", null, s.cron)), h("td", null, s.timezone),
      h("td", null, (s.task || {}).task_type || ""),
      h("td", { class: "next-fires" }, s.next_fire_at ? [
        h("span", { title: s.next_fire_at }, ago(s.next_fire_at)),
        h("span", { class: "muted" }, fires[i].map(localTime).join(" · "))] : "never"),
      h("td", null, (s.fires || []).length ? h("div", { class: "fires" }, s.fires.map((f) => h("span", {
        class: `fire ${f.outcome}`, title: `${f.fire_at} ${f.outcome}${f.task_id ? " " + f.task_id : ""}` })))
        : h("span", { class: "muted" }, "none yet")))),
    7, "no schedules");
  }

  // --- workflows (DESIGN 5.2; graph.js draws their steps) ---------------------------------------

  const countsText = (counts) => Object.entries(counts || {}).map(([k, n]) => `${k.replace("_", " ")} ${n}`).join(" · ");

  async function loadWorkflows() {
    const page = await api("GET", "/v1/workflows", { fresh: true, params: { limit: LIST_LIMIT } });
    $("workflow-list-note").textContent = page.next_cursor ? `newest ${LIST_LIMIT} shown` : "";
    fill($("workflow-list").tBodies[0], page.workflows.map((w) => h("tr", {
      class: `clickable${w.workflow_id === view.workflow ? " selected" : ""}`,
      dataset: { workflowId: w.workflow_id },
      onclick: () => { view.workflow = w.workflow_id; refreshSoon(); },
    },
    h("td", null, shortId(w.workflow_id)), h("td", null, w.tenant), h("td", null, badge(w.state)),
    h("td", { class: "num" }, w.step_count), h("td", { class: "counts" }, countsText(w.counts)),
    h("td", null, when(w.created_at)))), 6, "no workflows");
    if (view.workflow) await loadWorkflowDetail(view.workflow);
  }

  async function loadWorkflowDetail(id) {
    let w;
    try {
      w = await api("GET", `/v1/workflows/${encodeURIComponent(id)}`, { fresh: true });
    } catch (e) {
      if (e.status !== 404) throw e;
      view.workflow = null;
      $("workflow-detail").replaceChildren(h("p", { class: "muted" }, `workflow ${id} is gone (evicted)`));
      return;
    }
    const picture = TschedGraph.draw(w);
    const steps = w.steps.map((s) => h("tr", { dataset: { step: s.name } },
      h("td", null, s.name), h("td", null, badge(s.state)), h("td", null, shortId(s.task_id)),
      h("td", null, (s.deps || []).join(", ")), h("td", { title: s.error || "" }, s.error || "")));
    $("workflow-detail").replaceChildren(
      h("h3", null, "Workflow ", h("code", null, w.workflow_id), " ", badge(w.state)),
      h("p", { class: "muted" }, countsText(w.counts)),
      picture ? h("div", { class: "graph-box" }, picture)
        : h("p", { class: "muted" }, `${w.step_count} steps: too many to draw (at most ${TschedGraph.GRAPH_STEPS_MAX})`),
      h("table", { class: "grid", id: "workflow-steps" },
        h("thead", null, h("tr", null, h("th", null, "step"), h("th", null, "state"), h("th", null, "task"),
          h("th", null, "deps"), h("th", null, "error"))),
        h("tbody", null, steps)));
  }

  // --- graphs (charts.js draws them) -------------------------------------------------------------

  async function loadGraphs() {
    try {
      TschedCharts.draw(await api("GET", "/v1/timeseries", { params: { step_s: $("graph-step").value } }));
      $("graphs-note").textContent = "";
    } catch (e) {   // the rest of the page still works (a tenant token may not read them)
      $("graphs-note").textContent = `graphs unavailable: ${e.code || "network"}: ${e.message}`;
    }
  }

  // --- refresh loop ------------------------------------------------------------------------------

  // --- audit trail (DESIGN 14.6) -----------------------------------------------------------------

  const AUDIT_ROWS = 100;

  function changeText(change) {
    // {"before": {...}, "after": {...}} -> "field: old -> new; ..."; anything else as JSON.
    if (!change || typeof change !== "object") return "";
    const { before, after } = change;
    if (!("before" in change) || !("after" in change)) return JSON.stringify(change);
    if (before === null || after === null) return before === null ? "created" : "removed";
    return Object.keys(after).map((k) => `${k}: ${JSON.stringify(before[k])} \u2192 ${JSON.stringify(after[k])}`).join("; ");
  }

  async function loadAudit() {
    const params = { limit: AUDIT_ROWS };
    for (const [k, v] of Object.entries(view.audit)) if (v) params[k] = v;
    const page = await api("GET", "/v1/audit", { fresh: true, params });
    $("audit-note").textContent = page.next_cursor ? `newest ${page.entries.length} shown` : "";
    fill($("audit").tBodies[0], page.entries.map((e) => h("tr", { dataset: { auditId: e.id, action: e.action } },
      h("td", { title: e.at }, when(e.at)), h("td", null, e.actor), h("td", null, h("code", null, e.action)),
      h("td", { title: e.request_id }, e.target),
      h("td", { class: "change", title: JSON.stringify(e.change) }, changeText(e.change)))),
    5, "no operator actions recorded");
  }

  const TAB_LOADERS = { tasks: loadTasks, dlq: loadDeadLetters, schedules: loadSchedules,
    workflows: loadWorkflows, audit: loadAudit };

  async function refresh() {
    clearTimeout(view.timer);
    try {
      // Cluster status asks every node for its state digest, which costs time proportional
      // to the state: it is polled less often than the queues.
      const wantCluster = !view.cluster || Date.now() - view.clusterAt >= CLUSTER_REFRESH_MS;
      // Every part is fetched at once and drawn as soon as its answers are in.
      const [cluster, stats] = await Promise.all([
        wantCluster ? api("GET", "/v1/cluster").then((c) => {
          view.cluster = c;
          view.clusterAt = Date.now();
          renderCluster(c);
          return c;
        }) : view.cluster,
        Promise.all([api("GET", "/v1/stats", { fresh: true }), api("GET", "/v1/tenants", { fresh: true })])
          .then(([st, tenants]) => { renderQueues(st, tenants); return st; }),
        TAB_LOADERS[view.tab](),
        loadGraphs(),
        api("GET", "/v1/limits", { fresh: true }).then(renderLimits),
        api("GET", "/v1/queues", { fresh: true }).then(renderPauses),
      ]);
      renderFacts(cluster, stats);
      renderShards(cluster, stats);
      $("cluster-age").textContent = `as of ${new Date(view.clusterAt).toLocaleTimeString()}`;
      view.refreshes += 1;
      if (view.refreshes === 1) {
        // Time from navigation start to the first complete render with data (load time).
        document.body.dataset.firstRenderMs = Math.round(performance.now());
      }
      document.body.dataset.refreshes = view.refreshes;
      $("refresh-status").textContent = `updated ${new Date().toLocaleTimeString()}`;
      if (!$("banner").dataset.sticky) banner("");
    } catch (e) {
      const hint = e.status === 401 || e.status === 403 ? " (set an API token)" : "";
      $("refresh-status").textContent = "refresh failed";
      banner(`${e.code || "network"}: ${e.message}${hint}`);
    }
    if ($("auto-refresh").checked) view.timer = setTimeout(refresh, REFRESH_MS);
  }

  function refreshSoon() { clearTimeout(view.timer); view.timer = setTimeout(refresh, 0); }

  function wire() {
    for (const s of FILTER_STATES) $("f-state").append(h("option", { value: s }, s));
    for (const b of document.querySelectorAll(".tabs button")) {
      b.addEventListener("click", () => {
        view.tab = b.dataset.tab;
        for (const o of document.querySelectorAll(".tabs button")) o.classList.toggle("active", o === b);
        for (const t of Object.keys(TAB_LOADERS)) $(`tab-${t}`).hidden = t !== view.tab;
        refreshSoon();
      });
    }
    $("task-search").addEventListener("submit", (ev) => {
      ev.preventDefault();
      view.search = { id: $("f-id").value.trim(), state: $("f-state").value,
        tenant: $("f-tenant").value.trim(), type: $("f-type").value.trim() };
      view.selected = view.search.id || null;
      refreshSoon();
    });
    $("audit-search").addEventListener("submit", (ev) => {
      ev.preventDefault();
      view.audit = { actor: $("a-actor").value.trim(), action: $("a-action").value.trim(),
        target: $("a-target").value.trim() };
      refreshSoon();
    });
    $("auto-refresh").addEventListener("change", refreshSoon);
    $("graph-step").addEventListener("change", refreshSoon);
    document.addEventListener("visibilitychange", () => { if (!document.hidden) refreshSoon(); });
    $("token-button").addEventListener("click", () => { $("token-form").hidden = !$("token-form").hidden; });
    $("token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      view.token = $("token-input").value.trim();
      sessionStorage.setItem(TOKEN_KEY, view.token);
      $("token-form").hidden = true;
      refreshSoon();
    });
    $("token-clear").addEventListener("click", () => {
      view.token = "";
      sessionStorage.removeItem(TOKEN_KEY);
      $("token-input").value = "";
      refreshSoon();
    });
  }

  wire();
  refresh();
})();
