// The console: the fleet live, a mount's page, the event feed, webhooks and
// the firmware catalogue. Views are plain functions that fill <main> and
// return a stop function; routes are the URL's hash.
import * as auth from "./auth.js";
import { gql, rest, live, loadThenLive, APIError } from "./api.js";
import { h, main, session, isOwner, fmtDate, ago, fmtBattery, fmtTemp, fmtBool, showError, setConnection, MOUNT_FIELDS, EVENT_TYPES, VALUE_CODES, isUnverified, markUnverified, PRESENCES, presencePill, canReadAlarms, withEvent, field } from "./ui.js";
import { mountView } from "./mount.js";
import { webhooksView } from "./webhooks.js";
import { firmwareView } from "./firmware.js";
import { fleetExport } from "./exports.js";
import { auditView } from "./audit.js";
import { alarmsView, alarmRulesView, alarmBadge } from "./alarms.js";
import { jobsView, jobView, jobForm } from "./jobs.js";
import { rolloutsView, rolloutView } from "./rollouts.js";

// ---------- fleet ----------

// The fleet's boxes test each mount in the page; the overview counts the
// same mounts with the fleet filter twin of each test, in the server
// (docs/api.md, "Fleet filter"). A test and its twin select the same mounts.
const LOW_BATTERY = 20;
const SILENT_MS = 3600_000;
const isLow = (m) => m.batteryLevel !== null && m.batteryLevel !== undefined && m.batteryLevel < LOW_BATTERY;
// The battery shown is the reported value rounded half away from zero: shown
// below 20 is reported below 19.5, which is what the filter compares.
const LOW_EXPR = `batteryLevel < ${LOW_BATTERY - 0.5}`;
// Silent: not heard from (lastSeenAt, the server's clock) for an hour, or
// never. The filter has lastSeenAt, not lastReportAt (the mount's clock).
const isSilent = (m) => !m.lastSeenAt || Date.now() - Date.parse(m.lastSeenAt) > SILENT_MS;
// NOT matches a mount never heard from, as !m.lastSeenAt does.
const silentExpr = (now) => `NOT lastSeenAt >= "${new Date(now - SILENT_MS).toISOString()}"`;
const helmetOut = (m) => m.helmetMounted === false;
const HELMET_OUT_EXPR = "helmetMounted = false";

// loadMounts reads every page of the fleet, six requests in flight (what a
// browser opens to one host), each next page asked as soon as one answers.
// onFirst gets the first page at once, so a large fleet shows its first
// rows while the rest arrives. expression, when given, is a fleet filter
// (AIP-160) the server applies.
async function loadMounts(onFirst, expression) {
  const q = `query($p: Int!, $f: MountFilter) { mounts(currentPage: $p, pageSize: 100, filter: $f) { mounts { ${MOUNT_FIELDS} } pagination { totalPages } } }`;
  const f = expression ? { expression } : null;
  const first = await gql(q, { p: 1, f });
  onFirst?.(first.mounts.mounts);
  const pages = [first];
  let nextPage = 2;
  const total = first.mounts.pagination.totalPages;
  const worker = async () => {
    while (nextPage <= total) pages.push(await gql(q, { p: nextPage++, f }));
  };
  await Promise.all(Array.from({ length: 6 }, worker));
  return pages.flatMap((page) => page.mounts.mounts);
}

// The fleet's filters as they stand in the URL (#/fleet?state=IDLE&battery=low):
// a filtered fleet can be shared, the back button returns to the previous
// one, and the overview links to them.
const FLEET_FILTERS = {
  // A fleet filter expression the server evaluates (docs/api.md, "Fleet filter").
  expr: (v) => v.slice(0, 2000),
  q: (v) => v.slice(0, 100),
  state: (v) => (["ASSOCIATED", "IDLE"].includes(v) ? v : ""),
  battery: (v) => (v === "low" ? v : ""),
  helmet: (v) => (v === "out" ? v : ""),
  report: (v) => (v === "silent" ? v : ""),
  presence: (v) => (PRESENCES.includes(v) ? v : ""),
};
const fleetLink = (filters) => "#/fleet?" + new URLSearchParams(filters);

// Columns: key, heading, and whether a person may hide it.
const COLUMNS = [
  ["uid", "UID"], ["name", "Name"], ["modelNumber", "Model", true], ["serialNumber", "Serial", true],
  ["associationState", "State"], ["batteryLevel", "Battery"], ["mountLocked", "Lock"], ["helmetMounted", "Helmet"],
  ["cpuTemperature", "CPU"], ["firmwareRevision", "Firmware", true], ["softwareRevision", "Software", true], ["presence", "Presence"], ["lastReportAt", "Last report"],
];
const COLUMNS_KEY = "mountd.console.hiddenColumns";
// Only the names of hidden columns are kept in localStorage; never a token.
function hiddenColumns() {
  try {
    const v = JSON.parse(localStorage.getItem(COLUMNS_KEY) || "[]");
    return new Set(Array.isArray(v) ? v.filter((k) => COLUMNS.some((c) => c[0] === k && c[2])) : []);
  } catch {
    return new Set();
  }
}

// csvCell quotes a value; text that a spreadsheet would run as a formula
// (a mount's name is anyone's choice) is prefixed with an apostrophe, unless
// it is a plain number like -12.5: the server's exports keep the same rule.
function csvCell(v, text) {
  let s = v === null || v === undefined ? "" : String(v);
  if (text && /^[=+\-@\t\r]/.test(s) && !/^-?[0-9]+(\.[0-9]+)?$/.test(s)) s = "'" + s;
  return /[",\r\n]/.test(s) || s !== s.trim() ? `"${s.replaceAll('"', '""')}"` : s;
}

function fleetView(query) {
  const mounts = new Map();
  const rows = new Map();
  let shown = []; // the filtered, sorted mounts; only those near the viewport have rows
  const ROW_HEIGHT = 36;
  const pad = () => h("tr", { class: "pad" }, h("td", { colspan: COLUMNS.length }));
  const topPad = pad(), bottomPad = pad();
  const ui = {};
  const hidden = hiddenColumns();
  const tbody = h("tbody");
  const counts = h("div", { class: "counts", id: "counts", "aria-live": "polite" });
  const empty = h("div", { class: "empty", hidden: true }, "No mounts match.");
  let dirty = false;

  const sortBy = (key) => {
    const asc = ui.sort === key ? !ui.asc : true;
    Object.assign(ui, { sort: key, asc });
    writeQuery(true);
    showSort();
    layout();
  };
  const thead = h("tr", {}, COLUMNS.map(([key, label]) =>
    h("th", { "data-key": key, class: "c-" + key, tabindex: 0, scope: "col", onclick: () => sortBy(key),
      onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(key); } } }, label)));
  function showSort() {
    for (const th of thead.children) {
      const on = th.dataset.key === ui.sort;
      th.className = "c-" + th.dataset.key + (on ? " sorted" + (ui.asc ? " asc" : "") : "");
      if (on) th.setAttribute("aria-sort", ui.asc ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    }
  }

  // readQuery takes the filters and sort from the URL; writeQuery puts
  // them back (push: a new history entry; typing replaces the current one).
  function readQuery(q) {
    for (const [k, clean] of Object.entries(FLEET_FILTERS)) ui[k] = clean(q.get(k) || "");
    ui.sort = COLUMNS.some((c) => c[0] === q.get("sort")) ? q.get("sort") : "uid";
    ui.asc = q.get("dir") !== "desc";
  }
  function writeQuery(push) {
    const q = new URLSearchParams();
    for (const k of Object.keys(FLEET_FILTERS)) if (ui[k]) q.set(k, ui[k]);
    if (ui.sort !== "uid") q.set("sort", ui.sort);
    if (!ui.asc) q.set("dir", "desc");
    const hash = "#/fleet" + (q.size ? "?" + q : "");
    if (hash === location.hash) return;
    history[push ? "pushState" : "replaceState"](null, "", hash);
    routed = location.hash;
  }

  const CELL = {
    associationState: (td, m) => {
      td.firstChild.className = "pill " + m.associationState;
      td.firstChild.textContent = m.associationState;
    },
    batteryLevel: (td, m) => {
      td.textContent = fmtBattery(m.batteryLevel);
      td.className = "c-batteryLevel num battery" + (isLow(m) ? " low" : "");
    },
    mountLocked: (td, m) => { td.textContent = fmtBool(m.mountLocked, "Locked", "Unlocked"); },
    helmetMounted: (td, m) => { td.textContent = fmtBool(m.helmetMounted, "Present", "Absent"); },
    cpuTemperature: (td, m) => { td.textContent = fmtTemp(m.cpuTemperature); },
    presence: (td, m) => {
      td.replaceChildren(presencePill(m.presence));
      td.title = m.lastSeenAt ? "Last heard from " + fmtDate(m.lastSeenAt) : "Never heard from";
    },
    lastReportAt: (td, m) => {
      td.textContent = ago(m.lastReportAt);
      td.title = m.lastReportAt ? fmtDate(m.lastReportAt) : "";
      td.className = "c-lastReportAt" + (isSilent(m) ? " stale" : "");
    },
  };
  function fillRow(tr, m) {
    for (const [key] of COLUMNS) {
      if (key === "uid") continue;
      const td = tr.cellOf[key];
      if (CELL[key]) CELL[key](td, m);
      else td.textContent = m[key] || "";
      // A latest value the mount did not sign.
      if (VALUE_CODES[key]) markUnverified(td, isUnverified(m, key));
    }
    tr.dataset.last = m.lastReportAt || "";
  }

  function rowOf(m) {
    let tr = rows.get(m.uid);
    if (!tr) {
      tr = h("tr", { "data-uid": m.uid });
      tr.cellOf = {};
      for (const [key] of COLUMNS) {
        const td = h("td", { class: "c-" + key + (key === "batteryLevel" || key === "cpuTemperature" ? " num" : "") },
          key === "uid" ? h("a", { href: "#/mounts/" + encodeURIComponent(m.uid) }, m.uid) : key === "associationState" ? h("span") : "");
        tr.cellOf[key] = td;
        tr.append(td);
      }
      rows.set(m.uid, tr);
    }
    fillRow(tr, m);
    return tr;
  }

  function matches(m) {
    if (ui.q) {
      const q = ui.q.toLowerCase();
      if (![m.uid, m.name, m.serialNumber, m.modelNumber].some((v) => (v || "").toLowerCase().includes(q))) return false;
    }
    if (ui.state && m.associationState !== ui.state) return false;
    if (ui.battery && !isLow(m)) return false;
    if (ui.helmet && !helmetOut(m)) return false;
    if (ui.report && !isSilent(m)) return false;
    if (ui.presence && (m.presence || "UNKNOWN") !== ui.presence) return false;
    return true;
  }

  function layout() {
    dirty = false;
    const list = [...mounts.values()].filter(matches);
    const dir = ui.asc ? 1 : -1;
    list.sort((a, b) => {
      const x = a[ui.sort], y = b[ui.sort];
      if (x === y) return a.uid < b.uid ? -1 : 1;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * dir;
    });
    shown = list;
    table.dataset.count = list.length;
    renderWindow(true);
    empty.hidden = list.length > 0;
    let assoc = 0, low = 0, silent = 0, online = 0, offline = 0, unverified = 0;
    for (const m of mounts.values()) {
      if (Object.keys(VALUE_CODES).some((k) => isUnverified(m, k))) unverified++;
      if (m.associationState === "ASSOCIATED") assoc++;
      if (isLow(m)) low++;
      if (isSilent(m)) silent++;
      if (m.presence === "ONLINE") online++;
      if (m.presence === "OFFLINE") offline++;
    }
    counts.replaceChildren(
      h("span", {}, h("b", {}, mounts.size), loaded ? " mounts match the expression" : " mounts"), h("span", {}, h("b", { id: "shown" }, list.length), " shown"),
      h("span", {}, h("b", {}, assoc), " associated"), h("span", {}, h("b", { id: "count-online-fleet" }, online), " online"),
      h("span", {}, h("b", { id: "count-offline-fleet" }, offline), " offline"), h("span", {}, h("b", {}, low), " low battery"),
      h("span", {}, h("b", {}, silent), " not heard from for an hour or more"),
      // The table's cells are too narrow for the badge: a dot there, said here.
      unverified ? h("span", { id: "count-unverified-fleet" }, h("i", { class: "unverified-dot", "aria-hidden": "true" }), h("b", {}, unverified),
        " with values the mount did not sign") : []);
    exportControl?.refresh();
  }

  // renderWindow draws the rows in and near the viewport, and spacers for
  // the rest: a fleet of thousands costs the browser a screenful of rows.
  let windowFrom = -1, windowTo = -1;
  function renderWindow(force) {
    const top = table.getBoundingClientRect().top + 40; // below the header row
    const from = Math.max(0, Math.floor(-top / ROW_HEIGHT) - 20);
    const to = Math.min(shown.length, from + Math.ceil(innerHeight / ROW_HEIGHT) + 40);
    if (!force && from === windowFrom && to === windowTo) return;
    windowFrom = from;
    windowTo = to;
    topPad.firstChild.style.height = from * ROW_HEIGHT + "px";
    bottomPad.firstChild.style.height = (shown.length - to) * ROW_HEIGHT + "px";
    tbody.replaceChildren(topPad, ...shown.slice(from, to).map(rowOf), bottomPad);
  }
  const onScroll = () => renderWindow(false);
  addEventListener("scroll", onScroll, { passive: true });
  addEventListener("resize", onScroll, { passive: true });

  // Membership or order may change: lay out again on the next frame, once.
  const relayout = () => {
    if (!dirty) {
      dirty = true;
      requestAnimationFrame(layout);
    }
  };

  // loaded is the expression the mounts shown were read with; a load
  // started for an older one is dropped when it answers.
  let loaded = null, loading = 0;
  // exportControl is the toolbar's export menu (made below), refreshed
  // with the counts.
  let exportControl = null;
  async function load() {
    const t0 = performance.now();
    let tFirst = 0;
    const expr = ui.expr;
    const mine = ++loading;
    if (loaded !== expr) {
      mounts.clear();
      rows.clear();
      layout();
    }
    let all;
    try {
      all = await loadMounts((first) => {
        if (mine === loading && mounts.size === 0) {
          for (const m of first) mounts.set(m.uid, m);
          layout();
        }
        tFirst = performance.now();
      }, expr);
    } catch (err) {
      if (mine !== loading) return;
      // A filter the server refuses: its message under the box, no mounts.
      if (err instanceof APIError && err.code === "VALIDATION_FAILED" && err.fields.some((f) => f.field === "filter")) {
        loaded = expr;
        showExprError(err.fields.filter((f) => f.field === "filter").map((f) => f.message).join("; "));
        return;
      }
      throw err;
    }
    if (mine !== loading) return;
    loaded = expr;
    showExprError("");
    const t1 = performance.now();
    mounts.clear();
    for (const m of all) mounts.set(m.uid, m);
    for (const uid of rows.keys()) if (!mounts.has(uid)) rows.delete(uid);
    layout();
    // How long the fleet took to arrive and to lay out (the benchmark reads it).
    window.__fleetLoad = { startMs: t0, firstRowsMs: tFirst, fetchMs: t1 - t0, layoutMs: performance.now() - t1 };
  }

  function apply(ev) {
    // Filtered by an expression, only the mounts it selected are shown:
    // the server evaluates it, not the page.
    if (loaded && !mounts.has(ev.uid)) return;
    if (ev.type === "DELETED" || ev.mount.associationState === "INACTIVE") {
      mounts.delete(ev.uid);
      rows.delete(ev.uid);
      return relayout();
    }
    const known = mounts.has(ev.uid);
    const before = mounts.get(ev.uid);
    const m = withEvent(before, ev);
    mounts.set(ev.uid, m);
    const tr = rows.get(ev.uid);
    // A change of presence changes the counts above the table too.
    if (tr && tr.isConnected && known && ui.sort === "uid" && matches(m) && before.presence === m.presence) fillRow(tr, m);
    else relayout();
  }

  // csv: the rows shown (all of them, not only those drawn), in the
  // columns shown, raw values and times in UTC (RFC 3339).
  function csv() {
    const cols = COLUMNS.filter(([key]) => !hidden.has(key));
    const lines = [cols.map(([, label]) => csvCell(label)).join(",")];
    for (const m of shown) lines.push(cols.map(([key]) => csvCell(m[key], typeof m[key] === "string" && key !== "lastReportAt")).join(","));
    return lines.join("\r\n") + "\r\n";
  }

  const filterBox = (id, key, value, label) => h("label", {}, h("input", { type: "checkbox", id, onchange: (e) => {
    ui[key] = e.target.checked ? value : "";
    writeQuery(true);
    layout();
  } }), " " + label);
  const search = h("input", { type: "search", id: "search", "aria-label": "Search uid, name, model or serial number", placeholder: "Search uid, name, serial…",
    oninput: (e) => { ui.q = e.target.value; writeQuery(false); layout(); } });
  const stateSel = h("select", { id: "state", "aria-label": "Association state", onchange: (e) => { ui.state = e.target.value; writeQuery(true); layout(); } },
    h("option", { value: "" }, "Any state"), ["ASSOCIATED", "IDLE"].map((s) => h("option", { value: s }, s)));
  const presenceSel = h("select", { id: "presence", "aria-label": "Presence", onchange: (e) => { ui.presence = e.target.value; writeQuery(true); layout(); } },
    h("option", { value: "" }, "Any presence"), PRESENCES.map((p) => h("option", { value: p }, p.toLowerCase())));
  const boxes = {
    battery: filterBox("low", "battery", "low", `battery below ${LOW_BATTERY}%`),
    helmet: filterBox("helmet-out", "helmet", "out", "helmet out"),
    report: filterBox("silent", "report", "silent", "not heard from for an hour"),
  };
  const columnsMenu = h("details", { class: "menu" }, h("summary", {}, "Columns"),
    h("div", { class: "menu-body" }, COLUMNS.filter((c) => c[2]).map(([key, label]) => h("label", {}, h("input", {
      type: "checkbox", "data-column": key, checked: !hidden.has(key), onchange: (e) => {
        if (e.target.checked) hidden.delete(key);
        else hidden.add(key);
        localStorage.setItem(COLUMNS_KEY, JSON.stringify([...hidden]));
        showColumns();
      } }), " " + label))));
  const toolbar = h("div", { class: "toolbar", role: "search" }, search, stateSel, presenceSel, Object.values(boxes), columnsMenu,
    // One control: the rows shown (CSV made here), or the server's export
    // of the whole filter (owners).
    exportControl = fleetExport({ rows: () => shown.length, csv, expr: () => loaded ?? ui.expr, server: isOwner(), onError: showError }));

  // The fleet filter expression, submitted as a whole; the server's
  // refusal shows under the box.
  const exprInput = h("input", { type: "text", id: "expr", name: "expr", autocomplete: "off", spellcheck: "false", "aria-describedby": "expr-help expr-error",
    placeholder: 'batteryLevel < 20 AND presence = "OFFLINE"' });
  const exprError = h("p", { id: "expr-error", class: "form-status error" });
  function showExprError(text) {
    exprError.textContent = text;
    exprError.setAttribute("role", text ? "alert" : "status");
    if (text) exprInput.setAttribute("aria-invalid", "true");
    else exprInput.removeAttribute("aria-invalid");
    showJobButton();
  }
  const exprForm = h("form", { id: "expr-form", class: "expr-form", role: "search", "aria-label": "Fleet filter expression", onsubmit: (e) => {
    e.preventDefault();
    const v = FLEET_FILTERS.expr(exprInput.value.trim());
    if (v === ui.expr) return load().catch(showError);
    ui.expr = v;
    writeQuery(true);
    load().catch(showError);
  } },
  h("div", { class: "toolbar" }, h("label", { for: "expr" }, "Filter expression"), exprInput,
    h("button", { type: "submit", id: "expr-apply" }, "Apply"),
    h("button", { type: "button", id: "expr-clear", onclick: () => { exprInput.value = ""; exprForm.requestSubmit(); } }, "Clear"),
    isOwner() ? h("button", { type: "button", class: "primary", id: "job-new", hidden: true, "aria-controls": "job-form", onclick: () => {
      jobBox.hidden = !jobBox.hidden;
      if (!jobBox.hidden) jobBox.querySelector("select").focus();
    } }, "New job…") : ""),
  h("p", { id: "expr-help", class: "muted" }, "AIP-160 over uid, name, modelNumber, firmwareRevision, softwareRevision, associationState, presence, lastSeenAt, batteryLevel, cpuTemperature, mountLocked, helmetMounted; with AND, OR, NOT."),
  exprError);
  // An owner creates a job over the expression: its targets are the
  // associated mounts it selects.
  const jobBox = isOwner() ? jobForm(() => loaded, () => [...mounts.values()].filter((m) => m.associationState === "ASSOCIATED").length) : h("div", { hidden: true });
  function showJobButton() {
    const button = exprForm.querySelector("#job-new");
    if (!button) return;
    button.hidden = !loaded || exprError.textContent !== "";
    if (button.hidden) jobBox.hidden = true;
  }

  const table = h("table", { id: "fleet" }, h("caption", { class: "sr-only" }, "Mounts"), h("thead", {}, thead), tbody);
  function showColumns() {
    for (const [key, , optional] of COLUMNS) if (optional) table.classList.toggle("hide-" + key, hidden.has(key));
  }
  // syncControls shows ui in the toolbar (after a back or a link).
  function syncControls() {
    if (search.value !== ui.q) search.value = ui.q;
    if (exprInput.value !== ui.expr) exprInput.value = ui.expr;
    stateSel.value = ui.state;
    presenceSel.value = ui.presence;
    for (const [k, box] of Object.entries(boxes)) box.firstChild.checked = !!ui[k];
    showSort();
  }
  readQuery(query);
  syncControls();
  showColumns();
  main.replaceChildren(h("section", { class: "card", "aria-labelledby": "fleet-title" },
    h("div", { class: "title" }, h("h1", { id: "fleet-title" }, "Fleet"),
      isOwner() ? h("a", { class: "button primary", href: "#/associate", id: "associate-link" }, "Associate a mount") : ""),
    exprForm, toolbar, jobBox, counts, h("div", { class: "scroll" }, table), empty));

  let sub = null;
  const ticker = setInterval(() => { for (const [uid, tr] of rows) if (tr.isConnected) tr.cellOf.lastReportAt.textContent = ago(mounts.get(uid)?.lastReportAt); }, 5000);
  const started = loadThenLive({
    query: `subscription($after: ID) { mountEvents(after: $after) { id type uid occurredAt states { code value occurredAt } mount { ${MOUNT_FIELDS} } } }`,
    onEvent: apply, onResync: load, onState: setConnection,
  }).then((s) => { sub = s; }, showError);
  return {
    update(q) {
      readQuery(q);
      syncControls();
      if (ui.expr !== loaded) load().catch(showError);
      else layout();
    },
    stop() {
      clearInterval(ticker);
      removeEventListener("scroll", onScroll);
      removeEventListener("resize", onScroll);
      started.then(() => sub?.stop());
    },
  };
}

// ---------- overview ----------

// overviewView counts the fleet by what needs attention; each count links
// to the fleet filtered to those mounts.
function overviewView() {
  const grid = h("div", { class: "grid", id: "overview-counts", "aria-live": "polite" }, h("p", { class: "muted" }, "Loading…"));
  const when = h("span", { class: "muted" });
  const refresh = h("button", { type: "button", id: "refresh", onclick: () => count().catch(showError) }, "Count again");
  main.replaceChildren(h("section", { class: "card", id: "overview", "aria-labelledby": "overview-title" },
    h("div", { class: "title" }, h("h1", { id: "overview-title" }, "Overview"), h("span", { class: "toolbar" }, when, refresh)), grid));
  const tile = (id, label, n, href, bad) => h("a", { class: "tile" + (bad && n > 0 ? " attention" : ""), id, href },
    h("span", { class: "value" }, n), h("span", { class: "label" }, label));
  // The counts are taken when the page opens or on request; the fleet is the live view.
  // A request while a count runs counts again after it, so the counts shown
  // are never older than the last click.
  let counting = null, again = false;
  function count() {
    if (counting) {
      again = true;
      return counting;
    }
    refresh.setAttribute("aria-busy", "true");
    counting = (async () => {
      try {
        do {
          again = false;
          await counted();
        } while (again);
      } finally {
        counting = null;
        refresh.removeAttribute("aria-busy");
      }
    })();
    return counting;
  }
  async function counted() {
    const [n, alarms, webhooks] = await Promise.all([overviewCounts(Date.now()),
      canReadAlarms() ? activeAlarms() : null, isOwner() ? failingWebhooks() : null]);
    const tiles = [
      tile("count-all", "mounts", n.all, "#/fleet"),
      tile("count-associated", "associated", n.associated, fleetLink({ state: "ASSOCIATED" })),
      tile("count-idle", "waiting for confirmation (IDLE)", n.idle, fleetLink({ state: "IDLE" }), true),
      tile("count-low", `battery below ${LOW_BATTERY}%`, n.low, fleetLink({ battery: "low" }), true),
      tile("count-helmet", "helmet out", n.helmet, fleetLink({ helmet: "out" })),
      tile("count-silent", "not heard from for an hour", n.silent, fleetLink({ report: "silent" }), true),
      tile("count-online", "online", n.online, fleetLink({ presence: "ONLINE" })),
      tile("count-offline", "offline", n.offline, fleetLink({ presence: "OFFLINE" }), true),
      tile("count-unknown", "never heard from", n.unknown, fleetLink({ presence: "UNKNOWN" })),
    ];
    if (alarms !== null) tiles.push(tile("count-alarms", "active alarms", alarms, "#/alarms", true));
    if (webhooks !== null) tiles.push(tile("count-webhooks", "webhooks failing", webhooks, "#/webhooks", true));
    grid.replaceChildren(...tiles);
    when.textContent = "counted at " + fmtDate(new Date().toISOString());
  }
  count().catch(showError);
  return () => {};
}

// overviewCounts counts the fleet as the overview's tiles do, each tile's
// mounts selected by a fleet filter, in one request of one alias per tile:
// the server counts and the page reads no mount, one request whatever the
// fleet's size. Listings hold no INACTIVE mount. now is the instant the
// silent cut is taken at (isSilent takes Date.now() as it tests).
async function overviewCounts(now) {
  const expressions = {
    all: "",
    associated: 'associationState = "ASSOCIATED"',
    idle: 'associationState = "IDLE"',
    low: LOW_EXPR,
    helmet: HELMET_OUT_EXPR,
    silent: silentExpr(now),
    online: 'presence = "ONLINE"',
    offline: 'presence = "OFFLINE"',
    unknown: 'presence = "UNKNOWN"',
  };
  const names = Object.keys(expressions);
  // Written out whole, so that the cost test reads the operation as sent.
  const d = await gql(`query($all: MountFilter, $associated: MountFilter, $idle: MountFilter, $low: MountFilter,
      $helmet: MountFilter, $silent: MountFilter, $online: MountFilter, $offline: MountFilter, $unknown: MountFilter) {
    all: mounts(pageSize: 1, filter: $all) { pagination { totalItems } }
    associated: mounts(pageSize: 1, filter: $associated) { pagination { totalItems } }
    idle: mounts(pageSize: 1, filter: $idle) { pagination { totalItems } }
    low: mounts(pageSize: 1, filter: $low) { pagination { totalItems } }
    helmet: mounts(pageSize: 1, filter: $helmet) { pagination { totalItems } }
    silent: mounts(pageSize: 1, filter: $silent) { pagination { totalItems } }
    online: mounts(pageSize: 1, filter: $online) { pagination { totalItems } }
    offline: mounts(pageSize: 1, filter: $offline) { pagination { totalItems } }
    unknown: mounts(pageSize: 1, filter: $unknown) { pagination { totalItems } }
  }`, Object.fromEntries(names.map((k) => [k, expressions[k] ? { expression: expressions[k] } : null])));
  return Object.fromEntries(names.map((k) => [k, d[k].pagination.totalItems]));
}

// activeAlarms counts the account's active alarms.
async function activeAlarms() {
  return (await gql(`{ alarms(state: ACTIVE, pageSize: 1) { pagination { totalItems } } }`)).alarms.pagination.totalItems;
}

// failingWebhooks counts the webhooks whose latest delivery FAILED. A
// failed attempt with retries left is followed by a PENDING one, not yet
// made: the latest attempt made is the first that is not PENDING.
async function failingWebhooks() {
  let failing = 0;
  for (let p = 1; p <= 10; p++) {
    const d = (await gql(`query($p: Int!) { webhooks(currentPage: $p, pageSize: 100) { webhooks { id } pagination { totalPages } } }`, { p })).webhooks;
    // Six requests in flight at most, as for the fleet's pages.
    const queue = [...d.webhooks];
    const worker = async () => {
      for (let w; (w = queue.shift()); ) {
        const x = await gql(`query($id: ID!) { webhookDeliveries(id: $id, pageSize: 50) { deliveries { status } } }`, { id: w.id });
        if (x.webhookDeliveries.deliveries.find((del) => del.status !== "PENDING")?.status === "FAILED") failing++;
      }
    };
    await Promise.all(Array.from({ length: 6 }, worker));
    if (p >= d.pagination.totalPages) break;
  }
  return failing;
}

// associateCard: request an association, then confirm it within the window.
function associateCard(onDone) {
  const status = h("div", { id: "associate-status" });
  let timer = null;
  const form = h("form", { class: "toolbar", onsubmit: async (e) => {
    e.preventDefault();
    const uid = form.elements.uid.value.trim();
    const name = form.elements.name.value.trim();
    try {
      await gql(`mutation($in: RequestAssociationInput!) { requestAssociation(input: $in) { code } }`, { in: { uid, name: name || undefined } });
      const m = (await gql(`query($uid: ID!) { mount(uid: $uid) { uid associationDeadline } }`, { uid })).mount;
      pending(m);
      onDone();
    } catch (err) {
      status.replaceChildren(h("span", { class: "error" }, err.message));
    }
  } },
  h("input", { name: "uid", placeholder: "Mount uid", "aria-label": "Mount uid", required: true, pattern: "[A-Za-z0-9._:\\-]{1,64}" }),
  h("input", { name: "name", placeholder: "Name (optional)", "aria-label": "Name (optional)" }),
  h("button", { class: "primary", type: "submit" }, "Request association"));

  function pending(m) {
    clearInterval(timer);
    const left = h("span", { class: "countdown" });
    const tick = () => {
      const s = Math.max(0, Math.round((Date.parse(m.associationDeadline) - Date.now()) / 1000));
      left.textContent = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
      if (s === 0) {
        clearInterval(timer);
        status.replaceChildren(h("span", { class: "error" }, `The window for ${m.uid} has passed; request again.`));
      }
    };
    tick();
    timer = setInterval(tick, 1000);
    status.replaceChildren(h("span", {}, `${m.uid} is waiting for confirmation: `, left, " left. "),
      h("button", { class: "primary", id: "confirm", onclick: async () => {
        try {
          await gql(`mutation($uid: ID!) { confirmAssociation(uid: $uid) { uid } }`, { uid: m.uid });
          clearInterval(timer);
          status.replaceChildren(h("span", {}, `${m.uid} is associated.`));
        } catch (err) {
          status.replaceChildren(h("span", { class: "error" }, err.message));
        }
      } }, "Confirm"));
  }
  return h("section", { class: "card", id: "associate", "aria-labelledby": "associate-title" }, h("h1", { id: "associate-title" }, "Associate a mount"), form, status);
}

// ---------- events ----------

// eventsView: the newest events first: it opens with the last 50 events of
// the log that its filters select (GET /api/v1/events?tail=50), then adds
// live ones from right after them (nothing between the two is lost or
// shown twice). Filters (in the URL too, #/events?type=ABANDONED&mount=MNT-1)
// load again; state reports, most of the log, are left out unless asked
// for. Pause holds new events (the newest 500) until Resume, so that a row
// being read does not move.
const EVENTS_TAIL = 50, EVENTS_KEPT = 500;
function eventsView(query) {
  const tbody = h("tbody");
  const typeSel = h("select", { id: "event-type" },
    h("option", { value: "" }, "All but state reports"), h("option", { value: "all" }, "Any type"),
    EVENT_TYPES.map((t) => h("option", { value: t }, t)));
  const uidFilter = h("input", { type: "search", id: "event-mount", placeholder: "Mount uid", list: "event-mounts", maxlength: 64, autocomplete: "off", spellcheck: "false" });
  const known = h("datalist", { id: "event-mounts" });
  const pause = h("button", { type: "button", id: "events-pause", "aria-pressed": "false" }, "Pause");
  const status = h("p", { class: "muted", id: "events-status", role: "status" });
  const seen = new Set();
  const shown = new Set(); // the ids of the rows, so that no event is shown twice
  let held = []; // live events that arrived while paused, oldest first
  let paused = false;
  let sub = null;
  let generation = 0; // a reload outdates the history still arriving

  const row = (ev) => h("tr", { "data-type": ev.type, "data-uid": ev.uid, "data-id": ev.id }, h("td", {}, fmtDate(ev.occurredAt)), h("td", {}, ev.type),
    h("td", {}, h("a", { href: "#/mounts/" + encodeURIComponent(ev.uid) }, ev.uid)),
    h("td", { class: "wrap" }, ev.command ? `${ev.command.code} ${ev.command.status}${ev.command.reason ? ": " + ev.command.reason : ""}`
      : ev.alarm ? `${ev.alarm.severity} “${ev.alarm.ruleName}”${ev.type === "ALARM_ACKNOWLEDGED" && ev.alarm.acknowledgedBy ? " by " + (ev.alarm.acknowledgedByName || ev.alarm.acknowledgedBy) : ""}`
        : ev.type === "MOUNT_OFFLINE" ? "not heard from: offline" : ev.type === "MOUNT_ONLINE" ? "heard from again: online"
        : (ev.states || []).map((s) => `${s.code}=${s.value}${s.verified === false ? " (unverified)" : ""}`).join(", ")));
  // The types the filter selects (the mount events; account-level ones,
  // which the live feed does not carry, are left out of the history too).
  const types = () => (typeSel.value === "all" ? EVENT_TYPES : typeSel.value ? [typeSel.value] : EVENT_TYPES.filter((t) => t !== "STATES_REPORTED"));
  const selects = (ev) => types().includes(ev.type) && (!uidFilter.value.trim() || ev.uid === uidFilter.value.trim());

  function add(ev) {
    if (shown.has(ev.id)) return;
    shown.add(ev.id);
    tbody.prepend(row(ev));
    while (tbody.children.length > EVENTS_KEPT) {
      shown.delete(tbody.lastChild.dataset.id);
      tbody.lastChild.remove();
    }
    if (ev.uid && !seen.has(ev.uid) && seen.size < 1000) {
      seen.add(ev.uid);
      known.append(h("option", { value: ev.uid }));
    }
  }
  function say() {
    pause.textContent = paused ? (held.length ? `Resume (${held.length} new)` : "Resume") : "Pause";
    pause.setAttribute("aria-pressed", String(paused));
    status.textContent = !tbody.children.length ? "No events yet: new ones appear here as they happen."
      : paused ? `Paused: ${held.length ? held.length + " new event" + (held.length === 1 ? " is" : "s are") + " held until you resume" : "new events are held until you resume"}.`
        : "Newest first: the last events of the log, then live.";
  }
  function onEvent(ev) {
    if (!selects(ev)) return;
    if (paused) {
      held.push(ev);
      if (held.length > EVENTS_KEPT) held.shift();
    } else add(ev);
    say();
  }

  // history reads the last events the filters select: oldest first, with
  // the cursor right after them. A mount outside the person's is none.
  async function loadHistory() {
    const q = new URLSearchParams({ tail: EVENTS_TAIL, types: types().join(",") });
    if (uidFilter.value.trim()) q.set("mountUid", uidFilter.value.trim());
    try {
      return await rest("/events?" + q);
    } catch (err) {
      if (err instanceof APIError && err.code === "MOUNT_NOT_FOUND") return { events: [], next: null };
      throw err;
    }
  }
  function show(page) {
    tbody.replaceChildren();
    shown.clear();
    for (const ev of page.events) add(ev);
    say();
  }
  // open loads the history, then subscribes from right after it.
  async function open() {
    const mine = ++generation;
    sub?.stop();
    sub = null;
    held = [];
    let page = { events: [], next: null };
    try {
      page = await loadHistory();
    } catch (err) {
      if (mine === generation) showError(err);
    }
    if (mine !== generation) return;
    show(page);
    sub = live({
      query: `subscription($after: ID) { mountEvents(after: $after) { id type uid occurredAt states { code value verified } command { code status reason } alarm { ruleName severity acknowledgedBy acknowledgedByName } } }`,
      after: page.next || null, onEvent,
      // The cursor expired while away: the history again, then live from the head.
      onResync: async () => { if (mine === generation) show(await loadHistory()); },
      onState: setConnection,
    });
  }
  pause.onclick = () => {
    paused = !paused;
    if (!paused) {
      for (const ev of held) add(ev);
      held = [];
    }
    say();
  };

  const read = (q) => {
    typeSel.value = ["all", ...EVENT_TYPES].includes(q.get("type")) ? q.get("type") : "";
    uidFilter.value = (q.get("mount") || "").slice(0, 64);
    open();
  };
  const write = (push) => {
    const q = new URLSearchParams();
    if (typeSel.value) q.set("type", typeSel.value);
    if (uidFilter.value.trim()) q.set("mount", uidFilter.value.trim());
    const hash = "#/events" + (q.size ? "?" + q : "");
    if (hash === location.hash) return;
    history[push ? "pushState" : "replaceState"](null, "", hash);
    routed = location.hash;
  };
  typeSel.onchange = () => { write(true); open(); };
  uidFilter.onchange = () => { write(true); open(); };
  main.replaceChildren(h("section", { class: "card", "aria-labelledby": "events-title" },
    h("div", { class: "title" }, h("h1", { id: "events-title" }, "Events"), pause),
    h("div", { class: "toolbar", role: "search", "aria-label": "Filter the events" }, field("Type", typeSel), field("Mount", uidFilter), known),
    status,
    h("div", { class: "scroll" }, h("table", { id: "events" }, h("thead", {}, h("tr", {}, ["When", "Type", "Mount", "What"].map((t) => h("th", { scope: "col" }, t)))), tbody))));
  read(query);
  return { update: read, stop: () => { generation++; sub?.stop(); } };
}

// ---------- shell ----------

// The header's menu (under 700 px wide): the toggle opens and closes the
// navigation and the account; a route or Escape closes it.
const bar = document.getElementById("bar");
const menuToggle = document.getElementById("menu-toggle");
function setMenu(open) {
  bar.classList.toggle("open", open);
  menuToggle.setAttribute("aria-expanded", String(open));
}
menuToggle.onclick = () => setMenu(!bar.classList.contains("open"));
bar.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && bar.classList.contains("open")) {
    setMenu(false);
    menuToggle.focus();
  }
});

function welcome(message) {
  document.getElementById("nav").hidden = true;
  menuToggle.hidden = true;
  setMenu(false);
  main.replaceChildren(h("section", { class: "welcome" },
    h("h1", {}, "mountd"),
    h("p", {}, "The Mount Management Service: it associates helmet-lock mounts with operator accounts, collects their states, signs the commands a phone delivers to them over Bluetooth, keeps NFC tags in sync and ships firmware."),
    message ? h("p", { class: "error", role: "alert" }, message) : "",
    h("p", {}, h("button", { class: "primary", id: "signin", onclick: () => auth.signIn().catch((e) => welcome(e.message)) }, "Sign in")),
    h("p", { class: "muted" }, "People sign in with the username and password an administrator created with ", h("code", {}, "mountd users create"), "."),
    h("h2", {}, "For developers"),
    h("ul", {},
      h("li", {}, h("a", { href: "/graphiql" }, "GraphiQL"), ": explore and try the GraphQL API in the browser."),
      h("li", {}, h("a", { href: "/api/v1/openapi.json" }, "OpenAPI description"), " of the REST API under ", h("code", {}, "/api/v1"), "."),
      h("li", {}, "Servers get tokens at ", h("code", {}, "/oauth/v2/token"), " with client credentials and send them in ", h("code", {}, "Access-Key"), " or ", h("code", {}, "Authorization: Bearer"), "."))));
}

// routed is the hash the page shows; a view that writes its filters into
// the URL sets it, so that only a real change (a link, back) routes again.
let routed = null;
let current = null;

function route() {
  const hash = location.hash || "#/";
  if (hash === routed) return;
  routed = hash;
  setMenu(false);
  const i = hash.indexOf("?");
  const path = i < 0 ? hash : hash.slice(0, i);
  const query = new URLSearchParams(i < 0 ? "" : hash.slice(i + 1));
  const view = path.startsWith("#/mounts/") || path === "#/associate" ? "fleet" : path.startsWith("#/jobs") ? "jobs" : path.startsWith("#/rollouts") ? "rollouts" : path === "#/" || path === "#/overview" ? "overview" : path.slice(2);
  for (const a of document.querySelectorAll("#nav a")) {
    const on = a.dataset.view === view;
    a.classList.toggle("active", on);
    if (on) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  // The same view with other filters (back, a shared link) keeps its data.
  if (current?.path === path && current.update) return current.update(query);
  current?.stop();
  current = null;
  // Shown again by a view once its own subscription is live.
  const connection = document.getElementById("connection");
  connection.hidden = true;
  connection.dataset.state = "";
  // Focus moves to the new page, as a page load would move it.
  main.focus({ preventScroll: true });
  let m, v;
  if ((m = path.match(/^#\/mounts\/(.+)$/))) v = mountPage(decodePart(m[1]));
  else if (path === "#/fleet") v = fleetView(query);
  else if (path === "#/events") v = eventsView(query);
  else if (path === "#/webhooks" && isOwner()) v = webhooksView(query);
  else if (path === "#/firmware") v = firmwareView();
  else if (path === "#/associate" && isOwner()) v = associateView();
  else if (path === "#/audit" && isOwner()) v = auditView(query);
  else if (path === "#/alarms" && canReadAlarms()) v = alarmsView(query);
  else if (path === "#/alarm-rules" && isOwner()) v = alarmRulesView();
  else if (path === "#/jobs" && isOwner()) v = jobsView();
  else if ((m = path.match(/^#\/jobs\/(.+)$/)) && isOwner()) v = jobView(decodePart(m[1]));
  else if (path === "#/rollouts" && isOwner()) v = rolloutsView();
  else if ((m = path.match(/^#\/rollouts\/(.+)$/)) && isOwner()) v = rolloutView(decodePart(m[1]));
  else v = overviewView();
  current = typeof v === "function" ? { stop: v } : v;
  current.path = path;
}

// decodePart: a part of the route as written, when its % escapes are
// malformed (decodeURIComponent throws): the page then says not found.
function decodePart(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

// mountPage shows a mount's page once the server has said the mount is
// one the person may see; for any other (another account's, one outside a
// restricted user's mounts, none at all) it says so, and shows no empty
// page of it: no title, no cards, no command form.
function mountPage(uid) {
  let stopView = null, stopped = false;
  main.replaceChildren(h("p", { class: "muted", role: "status" }, "Loading…"));
  gql(`query($uid: ID!) { mount(uid: $uid) { uid } }`, { uid }).then(() => {
    if (!stopped) stopView = mountView(uid);
  }, (err) => {
    if (stopped) return;
    if (!(err instanceof APIError) || err.code !== "MOUNT_NOT_FOUND") return showError(err);
    main.replaceChildren(h("p", {}, h("a", { href: "#/fleet" }, "← Fleet")),
      h("section", { class: "card", id: "mount-not-found", "aria-labelledby": "mount-not-found-title" },
        h("h1", { id: "mount-not-found-title" }, "Mount not found"),
        h("p", {}, `There is no mount “${uid}” among the mounts you may see: it does not exist, or it belongs to another account, or to mounts not given to you.`)));
  });
  return () => {
    stopped = true;
    stopView?.();
  };
}

function associateView() {
  main.replaceChildren(h("p", {}, h("a", { href: "#/fleet" }, "← Fleet")), associateCard(() => {}));
  main.querySelector("input[name=uid]").focus();
  return () => {};
}

// tokenSubject: the sub claim of a JWT access token (the person's user
// id), to tell "you" apart where the API names a user; null if unreadable.
function tokenSubject(token) {
  try {
    return JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/"))).sub ?? null;
  } catch {
    return null;
  }
}

async function start() {
  try {
    await auth.init();
    await auth.completeSignIn();
  } catch (err) {
    return welcome(err.message);
  }
  if (!auth.signedIn()) return welcome();
  try {
    session.me = (await gql(`{ me { accountId name role mountUids } }`)).me;
    session.sub = tokenSubject(await auth.accessToken());
  } catch (err) {
    return welcome(err.code === "UNAUTHENTICATED" ? "" : err.message);
  }
  document.getElementById("nav").hidden = false;
  menuToggle.hidden = false;
  for (const a of document.querySelectorAll("#nav [data-owner]")) a.hidden = !isOwner();
  for (const a of document.querySelectorAll("#nav [data-alarms]")) a.hidden = !canReadAlarms();
  document.getElementById("alarm-slot").hidden = !canReadAlarms();
  alarmBadge();
  const who = document.getElementById("who");
  who.textContent = who.title = `${session.me.name} · ${session.me.role}`;
  const out = document.getElementById("signout");
  out.hidden = false;
  out.onclick = auth.signOut;
  addEventListener("hashchange", route);
  addEventListener("popstate", route);
  route();
}

start();
