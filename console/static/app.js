// The console: the fleet live, a mount's page, the event feed, webhooks and
// the firmware catalogue. Views are plain functions that fill <main> and
// return a stop function; routes are the URL's hash.
import * as auth from "./auth.js";
import { gql, live, APIError } from "./api.js";

const main = document.getElementById("main");
let me = null;
let stopView = () => {};

// h builds an element: h("a", {href: "#/"}, "text", child...).
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}

const isOwner = () => me?.role === "owner";
const fmtBattery = (v) => (v === null || v === undefined ? "—" : `${v}%`);
const fmtTemp = (v) => (v === null || v === undefined ? "—" : `${v.toFixed(1)} °C`);
const fmtBool = (v, yes, no) => (v === null || v === undefined ? "—" : v ? yes : no);

function ago(iso) {
  if (!iso) return "never";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

function showError(err) {
  if (err instanceof APIError && err.code === "UNAUTHENTICATED") return;
  main.prepend(h("p", { class: "card error", role: "alert" }, err.message || String(err)));
}

function setConnection(state) {
  const el = document.getElementById("connection");
  el.hidden = false;
  el.className = "connection " + state;
  el.dataset.state = state;
  el.textContent = { connecting: "connecting…", live: "live", down: "reconnecting…" }[state];
}

const MOUNT_FIELDS = "uid name associationState mountLocked helmetMounted batteryLevel cpuTemperature lastReportAt associationDeadline";

// lastReportOf: the event's newest state time, or the mount's own.
function lastReportOf(ev) {
  let t = ev.mount.lastReportAt;
  for (const s of ev.states || []) if (!t || s.occurredAt > t) t = s.occurredAt;
  return t;
}

// ---------- fleet ----------

const LOW_BATTERY = 20;
const SILENT_MS = 3600_000;

function fleetView() {
  const mounts = new Map();
  const rows = new Map();
  let shown = []; // the filtered, sorted mounts; only those near the viewport have rows
  const ROW_HEIGHT = 36;
  const pad = () => h("tr", { class: "pad" }, h("td", { colspan: 8 }));
  const topPad = pad(), bottomPad = pad();
  const ui = { search: "", state: "", low: false, silent: false, sort: "uid", asc: true };
  const tbody = h("tbody");
  const counts = h("div", { class: "counts", id: "counts" });
  const empty = h("div", { class: "empty", hidden: true }, "No mounts match.");
  let dirty = false;

  const head = [["uid", "UID"], ["name", "Name"], ["associationState", "State"], ["batteryLevel", "Battery"],
    ["mountLocked", "Lock"], ["helmetMounted", "Helmet"], ["cpuTemperature", "CPU"], ["lastReportAt", "Last report"]];
  const thead = h("tr", {}, head.map(([key, label]) =>
    h("th", { "data-key": key, class: key === ui.sort ? "sorted asc" : "", onclick: () => {
      ui.asc = ui.sort === key ? !ui.asc : true;
      ui.sort = key;
      for (const th of thead.children) th.className = th.dataset.key === key ? "sorted" + (ui.asc ? " asc" : "") : "";
      layout();
    } }, label)));

  function fillRow(tr, m) {
    const low = m.batteryLevel !== null && m.batteryLevel !== undefined && m.batteryLevel < LOW_BATTERY;
    const silent = !m.lastReportAt || Date.now() - Date.parse(m.lastReportAt) > SILENT_MS;
    const c = tr.children;
    c[1].textContent = m.name || "";
    c[2].firstChild.className = "pill " + m.associationState;
    c[2].firstChild.textContent = m.associationState;
    c[3].textContent = fmtBattery(m.batteryLevel);
    c[3].className = "num battery" + (low ? " low" : "");
    c[4].textContent = fmtBool(m.mountLocked, "Locked", "Unlocked");
    c[5].textContent = fmtBool(m.helmetMounted, "Present", "Absent");
    c[6].textContent = fmtTemp(m.cpuTemperature);
    c[7].textContent = ago(m.lastReportAt);
    c[7].className = silent ? "stale" : "";
    tr.dataset.last = m.lastReportAt || "";
  }

  function rowOf(m) {
    let tr = rows.get(m.uid);
    if (!tr) {
      tr = h("tr", { "data-uid": m.uid },
        h("td", {}, h("a", { href: "#/mounts/" + encodeURIComponent(m.uid) }, m.uid)),
        h("td"), h("td", {}, h("span")), h("td", { class: "num battery" }), h("td"), h("td"), h("td", { class: "num" }), h("td"));
      rows.set(m.uid, tr);
    }
    fillRow(tr, m);
    return tr;
  }

  function matches(m) {
    if (ui.search) {
      const q = ui.search.toLowerCase();
      if (!m.uid.toLowerCase().includes(q) && !(m.name || "").toLowerCase().includes(q)) return false;
    }
    if (ui.state && m.associationState !== ui.state) return false;
    if (ui.low && !(m.batteryLevel !== null && m.batteryLevel !== undefined && m.batteryLevel < LOW_BATTERY)) return false;
    if (ui.silent && m.lastReportAt && Date.now() - Date.parse(m.lastReportAt) <= SILENT_MS) return false;
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
    let assoc = 0, low = 0, silent = 0;
    for (const m of mounts.values()) {
      if (m.associationState === "ASSOCIATED") assoc++;
      if (m.batteryLevel !== null && m.batteryLevel !== undefined && m.batteryLevel < LOW_BATTERY) low++;
      if (!m.lastReportAt || Date.now() - Date.parse(m.lastReportAt) > SILENT_MS) silent++;
    }
    counts.replaceChildren(
      h("span", {}, h("b", {}, mounts.size), " mounts"), h("span", {}, h("b", {}, list.length), " shown"),
      h("span", {}, h("b", {}, assoc), " associated"), h("span", {}, h("b", {}, low), " low battery"),
      h("span", {}, h("b", {}, silent), " silent for an hour or more"));
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

  async function load() {
    const t0 = performance.now();
    const q = `query($p: Int!) { mounts(currentPage: $p, pageSize: 100) { mounts { ${MOUNT_FIELDS} } pagination { totalPages } } }`;
    const first = await gql(q, { p: 1 });
    const pages = [first];
    // The first page is drawn at once: a large fleet shows its first rows
    // while the rest arrives.
    if (mounts.size === 0) {
      for (const m of first.mounts.mounts) mounts.set(m.uid, m);
      layout();
    }
    const tFirst = performance.now();
    // Six requests in flight (what a browser opens to one host), each
    // next page asked as soon as one answers.
    let nextPage = 2;
    const total = first.mounts.pagination.totalPages;
    const worker = async () => {
      while (nextPage <= total) pages.push(await gql(q, { p: nextPage++ }));
    };
    await Promise.all(Array.from({ length: 6 }, worker));
    const t1 = performance.now();
    mounts.clear();
    for (const page of pages) for (const m of page.mounts.mounts) mounts.set(m.uid, m);
    for (const uid of rows.keys()) if (!mounts.has(uid)) rows.delete(uid);
    layout();
    // How long the fleet took to arrive and to lay out (the benchmark reads it).
    window.__fleetLoad = { startMs: t0, firstRowsMs: tFirst, fetchMs: t1 - t0, layoutMs: performance.now() - t1 };
  }

  function apply(ev) {
    if (ev.type === "DELETED" || ev.mount.associationState === "INACTIVE") {
      mounts.delete(ev.uid);
      rows.delete(ev.uid);
      return relayout();
    }
    const known = mounts.has(ev.uid);
    const m = { ...(mounts.get(ev.uid) || {}), ...ev.mount, lastReportAt: lastReportOf(ev) };
    mounts.set(ev.uid, m);
    const tr = rows.get(ev.uid);
    if (tr && tr.isConnected && known && ui.sort === "uid" && matches(m)) fillRow(tr, m);
    else relayout();
  }

  const toolbar = h("div", { class: "toolbar" },
    h("input", { type: "search", id: "search", placeholder: "Search uid or name", oninput: (e) => { ui.search = e.target.value; layout(); } }),
    h("select", { id: "state", onchange: (e) => { ui.state = e.target.value; layout(); } },
      h("option", { value: "" }, "Any state"), ["ASSOCIATED", "IDLE"].map((s) => h("option", { value: s }, s))),
    h("label", {}, h("input", { type: "checkbox", id: "low", onchange: (e) => { ui.low = e.target.checked; layout(); } }), ` battery below ${LOW_BATTERY}%`),
    h("label", {}, h("input", { type: "checkbox", id: "silent", onchange: (e) => { ui.silent = e.target.checked; layout(); } }), " silent for an hour or more"));

  const table = h("table", { id: "fleet" }, h("thead", {}, thead), tbody);
  main.replaceChildren(
    h("section", { class: "card" }, h("h2", {}, "Fleet"), toolbar, counts, table, empty),
    isOwner() ? associateCard(() => {}) : "");

  let sub = null;
  const ticker = setInterval(() => { for (const [uid, tr] of rows) if (tr.isConnected) tr.children[7].textContent = ago(mounts.get(uid)?.lastReportAt); }, 5000);
  const started = load().then(() => {
    sub = live({
      query: `subscription($after: ID) { mountEvents(after: $after) { id type uid occurredAt states { code value occurredAt } mount { ${MOUNT_FIELDS} } } }`,
      onEvent: apply, onResync: load, onState: setConnection,
    });
  }, showError);
  return () => {
    clearInterval(ticker);
    removeEventListener("scroll", onScroll);
    removeEventListener("resize", onScroll);
    started.then(() => sub?.stop());
  };
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
  h("input", { name: "uid", placeholder: "Mount uid", required: true, pattern: "[A-Za-z0-9._:\\-]{1,64}" }),
  h("input", { name: "name", placeholder: "Name (optional)" }),
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
  return h("section", { class: "card", id: "associate" }, h("h2", {}, "Associate a mount"), form, status);
}

// ---------- a mount ----------

function mountView(uid) {
  const values = h("div", { class: "grid" });
  const charts = h("div", { class: "charts" });
  const commands = h("tbody");
  const tags = h("ul");
  const actions = h("div", { class: "toolbar" });
  const periodSel = h("select", { id: "period", onchange: () => loadHistory() },
    [["1h", 3600], ["24h", 86400], ["7d", 604800]].map(([l, s]) => h("option", { value: s, selected: l === "24h" }, "last " + l)));
  let mount = null;
  const plots = [];

  function showValues(m) {
    mount = m;
    const cell = (label, value) => h("div", {}, h("div", { class: "label" }, label), h("div", { class: "value" }, value));
    values.replaceChildren(
      cell("State", m.associationState), cell("Battery", fmtBattery(m.batteryLevel)),
      cell("Lock", fmtBool(m.mountLocked, "Locked", "Unlocked")), cell("Helmet", fmtBool(m.helmetMounted, "Present", "Absent")),
      cell("CPU temperature", fmtTemp(m.cpuTemperature)), cell("Last report", ago(m.lastReportAt)));
    actions.replaceChildren();
    if (isOwner() && m.associationState === "IDLE") {
      actions.append(h("button", { class: "primary", onclick: async () => {
        try {
          showValues((await gql(`mutation($uid: ID!) { confirmAssociation(uid: $uid) { ${MOUNT_FIELDS} } }`, { uid })).confirmAssociation);
        } catch (err) { showError(err); }
      } }, "Confirm association"));
    }
    if (isOwner() && m.associationState !== "INACTIVE") {
      actions.append(h("button", { class: "danger", id: "abandon", onclick: async () => {
        if (!confirm(`Abandon ${uid}? Its owner key is cleared and it must be associated again.`)) return;
        try {
          await gql(`mutation($uid: ID!) { abandonMount(uid: $uid) }`, { uid });
          location.hash = "#/";
        } catch (err) { showError(err); }
      } }, "Abandon"));
    }
  }

  async function loadHistory() {
    const from = new Date(Date.now() - Number(periodSel.value) * 1000).toISOString();
    const series = async (code) => {
      const out = [];
      for (let p = 1; p <= 10; p++) { // at most 1,000 points a chart
        const page = (await gql(`query($uid: ID!, $code: String, $from: DateTime, $p: Int!) {
          mountStates(uid: $uid, code: $code, from: $from, currentPage: $p, pageSize: 100) { states { value occurredAt } pagination { totalPages } } }`,
        { uid, code, from, p })).mountStates;
        out.push(...page.states);
        if (p >= page.pagination.totalPages) break;
      }
      // uPlot wants x ascending; equal instants keep one point.
      out.sort((a, b) => Date.parse(a.occurredAt) - Date.parse(b.occurredAt));
      const xs = [], ys = [];
      for (const s of out) {
        const x = Date.parse(s.occurredAt) / 1000;
        if (xs.length && xs[xs.length - 1] === x) ys[ys.length - 1] = Number(s.value);
        else { xs.push(x); ys.push(Number(s.value)); }
      }
      return [xs, ys];
    };
    const [battery, temp] = await Promise.all([series("BATTERY_LEVEL"), series("CPU_TEMPERATURE")]);
    while (plots.length) plots.pop().destroy();
    const specs = [["Battery", battery, "%"], ["CPU temperature", temp, "°C"]];
    const boxes = specs.map(([title]) => h("div", { class: "card chart" }, h("h3", {}, title)));
    // Lay the boxes out first, so that each plot takes its box's width.
    charts.replaceChildren(...boxes);
    specs.forEach(([title, data, unit], i) => {
      const box = boxes[i];
      if (!data[0].length) {
        box.append(h("p", { class: "muted" }, "No reports in this period."));
        return;
      }
      plots.push(new uPlot({ width: Math.max(280, box.clientWidth - 34), height: 220,
        series: [{}, { label: title, stroke: "#2f6fde", width: 2, points: { show: data[0].length < 60 }, value: (u, v) => (v === null ? "—" : v + " " + unit) }],
        axes: [{}, { values: (u, vals) => vals.map((v) => v + unit) }] }, data, box));
    });
  }

  async function load() {
    const d = await gql(`query($uid: ID!) { mount(uid: $uid) { ${MOUNT_FIELDS} nfcTags { uid name } } }`, { uid });
    showValues(d.mount);
    tags.replaceChildren(...(d.mount.nfcTags.length ? d.mount.nfcTags.map((t) => h("li", {}, `${t.name || t.uid} (${t.uid})`)) : [h("li", { class: "muted" }, "none")]));
    if (isOwner()) {
      const c = await gql(`query($uid: ID!) { mountCommands(uid: $uid, pageSize: 50) { commands { code generatedAt issuedBy } } }`, { uid });
      commands.replaceChildren(...c.mountCommands.commands.map((x) => h("tr", {}, h("td", {}, x.code), h("td", {}, new Date(x.generatedAt).toLocaleString()), h("td", {}, x.issuedBy || ""))));
    }
    await loadHistory();
  }

  main.replaceChildren(
    h("p", {}, h("a", { href: "#/" }, "← Fleet")),
    h("section", { class: "card" }, h("h2", { id: "mount-uid" }, uid), values, actions),
    h("section", { class: "card" }, h("div", { class: "toolbar" }, h("h2", {}, "History"), periodSel), charts),
    isOwner() ? h("section", { class: "card" }, h("h2", {}, "Command audit"), h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "Code"), h("th", {}, "Issued"), h("th", {}, "By"))), commands)) : "",
    h("section", { class: "card" }, h("h2", {}, "NFC tags"), tags));

  let sub = null;
  const started = load().then(() => {
    sub = live({
      query: `subscription($uids: [ID!], $after: ID) { mountEvents(uids: $uids, after: $after) { id type uid occurredAt states { code value occurredAt } mount { ${MOUNT_FIELDS} } } }`,
      variables: { uids: [uid] },
      onEvent: (ev) => showValues({ ...ev.mount, lastReportAt: lastReportOf(ev) }),
      onResync: load, onState: setConnection,
    });
  }, showError);
  return () => {
    started.then(() => sub?.stop());
    while (plots.length) plots.pop().destroy();
  };
}

// ---------- events ----------

function eventsView() {
  const tbody = h("tbody");
  const typeSel = h("select", { id: "event-type" }, h("option", { value: "" }, "Any type"),
    ["STATES_REPORTED", "ASSOCIATION_REQUESTED", "ASSOCIATION_CONFIRMED", "ASSOCIATION_EXPIRED", "ABANDONED", "DELETED", "NFC_TAGS_SYNCED", "COMMAND_ISSUED"]
      .map((t) => h("option", { value: t }, t)));
  const uidFilter = h("input", { type: "search", placeholder: "Mount uid" });
  const row = (ev) => h("tr", { "data-type": ev.type, "data-uid": ev.uid }, h("td", {}, new Date(ev.occurredAt).toLocaleString()), h("td", {}, ev.type),
    h("td", {}, h("a", { href: "#/mounts/" + encodeURIComponent(ev.uid) }, ev.uid)),
    h("td", {}, (ev.states || []).map((s) => `${s.code}=${s.value}`).join(", ")));
  const visible = (tr) => (!typeSel.value || tr.dataset.type === typeSel.value) && (!uidFilter.value || tr.dataset.uid.includes(uidFilter.value));
  const refilter = () => { for (const tr of tbody.children) tr.hidden = !visible(tr); };
  typeSel.onchange = refilter;
  uidFilter.oninput = refilter;
  main.replaceChildren(h("section", { class: "card" }, h("h2", {}, "Events"), h("p", { class: "muted" }, "Live, newest first; the last 500 are kept."),
    h("div", { class: "toolbar" }, typeSel, uidFilter),
    h("table", { id: "events" }, h("thead", {}, h("tr", {}, h("th", {}, "When"), h("th", {}, "Type"), h("th", {}, "Mount"), h("th", {}, "States"))), tbody)));
  const sub = live({
    query: `subscription($after: ID) { mountEvents(after: $after) { id type uid occurredAt states { code value } } }`,
    onEvent: (ev) => {
      const tr = row(ev);
      tr.hidden = !visible(tr);
      tbody.prepend(tr);
      while (tbody.children.length > 500) tbody.lastChild.remove();
    },
    onResync: async () => {}, onState: setConnection,
  });
  return () => sub.stop();
}

// ---------- webhooks ----------

function webhooksView() {
  const list = h("tbody");
  const deliveries = h("div");
  const created = h("div");
  async function load() {
    const d = await gql(`{ webhooks(pageSize: 20) { webhooks { id url eventTypes enabled description } } }`);
    list.replaceChildren(...d.webhooks.webhooks.map((w) => h("tr", {},
      h("td", {}, w.url), h("td", {}, w.eventTypes.join(", ") || "all"), h("td", {}, w.enabled ? "enabled" : "disabled"),
      h("td", {}, h("button", { onclick: () => showDeliveries(w) }, "Deliveries")),
      h("td", {}, h("button", { class: "danger", onclick: async () => {
        if (!confirm(`Delete the webhook to ${w.url}?`)) return;
        await gql(`mutation($id: ID!) { deleteWebhook(id: $id) }`, { id: w.id }).catch(showError);
        load();
      } }, "Delete")))));
  }
  async function showDeliveries(w) {
    const d = await gql(`query($id: ID!) { webhookDeliveries(id: $id, pageSize: 50) { deliveries { eventType attempt status responseStatus error attemptedAt nextAttemptAt } } }`, { id: w.id });
    deliveries.replaceChildren(h("h3", {}, "Deliveries to " + w.url), h("table", {},
      h("thead", {}, h("tr", {}, ["Event", "Attempt", "Status", "Answer", "Attempted", "Next"].map((t) => h("th", {}, t)))),
      h("tbody", {}, d.webhookDeliveries.deliveries.map((x) => h("tr", {}, h("td", {}, x.eventType), h("td", { class: "num" }, x.attempt), h("td", {}, x.status),
        h("td", {}, x.error || x.responseStatus || ""), h("td", {}, x.attemptedAt ? new Date(x.attemptedAt).toLocaleString() : ""),
        h("td", {}, x.nextAttemptAt ? new Date(x.nextAttemptAt).toLocaleString() : ""))))));
  }
  const form = h("form", { class: "toolbar", onsubmit: async (e) => {
    e.preventDefault();
    try {
      const d = await gql(`mutation($in: CreateWebhookInput!) { createWebhook(input: $in) { secret webhook { id } } }`, { in: { url: form.elements.url.value } });
      created.replaceChildren(h("p", {}, "The signing secret is shown only now:"), h("p", { class: "secret" }, d.createWebhook.secret));
      form.reset();
      load();
    } catch (err) {
      created.replaceChildren(h("p", { class: "error" }, err.message));
    }
  } }, h("input", { name: "url", type: "url", placeholder: "https://receiver.example/hook", required: true, size: 40 }), h("button", { class: "primary" }, "Add webhook"));
  main.replaceChildren(h("section", { class: "card" }, h("h2", {}, "Webhooks"), form, created,
    h("table", {}, h("thead", {}, h("tr", {}, ["URL", "Events", "", "", ""].map((t) => h("th", {}, t)))), list), deliveries));
  load().catch(showError);
  return () => {};
}

// ---------- firmware ----------

function firmwareView() {
  const body = h("tbody");
  main.replaceChildren(h("section", { class: "card" }, h("h2", {}, "Firmware"),
    h("p", { class: "muted" }, "Each model's versions, newest first; the latest available one is marked."),
    h("table", { id: "firmware" }, h("thead", {}, h("tr", {}, ["Model", "Revision", "Available since", "", "Size"].map((t) => h("th", {}, t)))), body)));
  (async () => {
    const all = [];
    for (let p = 1; p <= 20; p++) {
      const d = (await gql(`query($p: Int!) { firmwareVersions(currentPage: $p, pageSize: 100) { versions { modelNumber softwareRevision availableSince deprecated mandatory size } pagination { totalPages } } }`, { p })).firmwareVersions;
      all.push(...d.versions);
      if (p >= d.pagination.totalPages) break;
    }
    const latest = new Map();
    const now = Date.now();
    for (const v of all) {
      if (v.deprecated || Date.parse(v.availableSince) > now) continue;
      const cur = latest.get(v.modelNumber);
      if (!cur || cmpSemver(v.softwareRevision, cur.softwareRevision) > 0) latest.set(v.modelNumber, v);
    }
    all.sort((a, b) => (a.modelNumber === b.modelNumber ? cmpSemver(b.softwareRevision, a.softwareRevision) : a.modelNumber < b.modelNumber ? -1 : 1));
    body.replaceChildren(...all.map((v) => h("tr", {}, h("td", {}, v.modelNumber), h("td", {}, v.softwareRevision),
      h("td", {}, new Date(v.availableSince).toLocaleString()),
      h("td", {}, latest.get(v.modelNumber) === v ? h("span", { class: "pill ASSOCIATED" }, "latest") : "", v.deprecated ? " deprecated" : "", v.mandatory ? " mandatory" : ""),
      h("td", { class: "num" }, `${(v.size / 1048576).toFixed(1)} MiB`))));
    if (!all.length) body.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, "No firmware published.")));
  })().catch(showError);
  return () => {};
}

function cmpSemver(a, b) {
  const pa = a.split(/[.+-]/).map(Number), pb = b.split(/[.+-]/).map(Number);
  for (let i = 0; i < 3; i++) if ((pa[i] || 0) !== (pb[i] || 0)) return (pa[i] || 0) - (pb[i] || 0);
  return 0;
}

// ---------- shell ----------

function welcome(message) {
  document.getElementById("nav").hidden = true;
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

function route() {
  stopView();
  stopView = () => {};
  const hash = location.hash || "#/";
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.getAttribute("href") === hash || (hash.startsWith("#/mounts/") && a.dataset.view === "fleet"));
  let m;
  if ((m = hash.match(/^#\/mounts\/(.+)$/))) stopView = mountView(decodeURIComponent(m[1]));
  else if (hash === "#/events") stopView = eventsView();
  else if (hash === "#/webhooks" && isOwner()) stopView = webhooksView();
  else if (hash === "#/firmware") stopView = firmwareView();
  else stopView = fleetView();
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
    me = (await gql(`{ me { accountId name role mountUids } }`)).me;
  } catch (err) {
    return welcome(err.code === "UNAUTHENTICATED" ? "" : err.message);
  }
  document.getElementById("nav").hidden = false;
  for (const a of document.querySelectorAll("#nav [data-owner]")) a.hidden = !isOwner();
  document.getElementById("who").textContent = `${me.name} · ${me.role}`;
  const out = document.getElementById("signout");
  out.hidden = false;
  out.onclick = auth.signOut;
  addEventListener("hashchange", route);
  route();
}

start();
