// A mount's page: who it is, its values live, the history charts beside the
// lock and helmet timeline, the commands to carry, its riders' offline
// access, and for owners rename, the command audit and its NFC tags.
import { gql, loadThenLive } from "./api.js";
import { exportMenu } from "./exports.js";
import { h, main, isOwner, fmtDate, ago, fmtBattery, fmtTemp, fmtBool, showError, setConnection, MOUNT_FIELDS, errorText, statusBox, field, fetchPages, COMMAND_STATUS_EVENTS, isUnverified, markUnverified, presencePill, withEvent } from "./ui.js";
import { mountAlarms, ALARM_FIELDS } from "./alarms.js";
import { grantsCard } from "./grants.js";

const LEVELS = ["LOW", "MEDIUM", "HIGH"];
// The codes a mount takes and their parameters, all required (docs/api.md,
// "Commands"): [name, label, the values or none for free text].
export const COMMANDS = {
  RELEASE_HELMET: [],
  CONFIGURE_ALARM: [["alarmMode", "Alarm mode", ["OFF", "ON", "SILENT"]], ["alarmSensitivity", "Alarm sensitivity", LEVELS], ["alarmVolume", "Alarm volume", LEVELS]],
  SET_RFID_MODE: [["rfidMode", "RFID mode", ["NORMAL", "LEARN", "DISABLED"]]],
  ADD_NFC_TAG: [["tagUid", "Tag uid"]],
  REMOVE_NFC_TAG: [["tagUid", "Tag uid"]],
  SYNC_NFC_TAGS: [],
};
// The two-valued states drawn as bands: code, row label, the words for 1 and 0.
const BANDS = [["MOUNT_LOCKED", "Lock", "Locked", "Unlocked"], ["HELMET_MOUNTED", "Helmet", "Present", "Absent"]];
const SERIES_PAGES = 10; // at most 1,000 points a series
const MAX_TAGS = 200; // what one synchronisation takes
const tagKey = (uid) => uid.replace(/:/g, "").toUpperCase();

// keyFingerprint is how the page shows a device key (docs/api.md, "Device
// key"): its first 16 hexadecimal characters in groups of four, enough to
// tell one key from another by eye; the whole key is its title.
export const keyFingerprint = (key) => key.slice(0, 16).match(/.{4}/g).join(" ");

// deviceKeyItem is the identity's device key: the fingerprint of the key
// this association pinned, or that none was (reports are then unsigned).
function deviceKeyItem(key) {
  return h("div", { "data-field": "devicePublicKey" }, h("dt", { class: "label" }, "Device key"),
    h("dd", {}, key ? h("code", { title: key }, keyFingerprint(key)) : "None pinned (unsigned reports)"));
}

export function mountView(uid) {
  const title = h("span", { id: "mount-name" });
  const values = h("div", { class: "grid" });
  const identity = h("dl", { class: "grid identity", id: "identity" });
  const charts = h("div", { class: "charts", id: "mount-charts" });
  const commands = h("tbody");
  const actions = h("div", { class: "toolbar" });
  const periodSel = h("select", { id: "period", onchange: () => loadHistory().catch(showError) },
    [["1h", 3600], ["24h", 86400], ["7d", 604800]].map(([l, s]) => h("option", { value: s, selected: l === "24h" }, "last " + l)));
  let mount = null;
  const plots = [];

  function showValues(m) {
    mount = m;
    title.textContent = m.name;
    // A value the mount did not sign is marked "unverified".
    const cell = (label, value, key) => h("div", { "data-value": key || "" }, h("div", { class: "label" }, label),
      markUnverified(h("div", { class: "value" }, value), !!key && isUnverified(m, key)));
    values.replaceChildren(
      cell("State", m.associationState), cell("Battery", fmtBattery(m.batteryLevel), "batteryLevel"),
      cell("Lock", fmtBool(m.mountLocked, "Locked", "Unlocked"), "mountLocked"), cell("Helmet", fmtBool(m.helmetMounted, "Present", "Absent"), "helmetMounted"),
      cell("CPU temperature", fmtTemp(m.cpuTemperature), "cpuTemperature"), cell("Last report", ago(m.lastReportAt)),
      h("div", { "data-value": "presence", id: "mount-presence" }, h("div", { class: "label" }, "Presence"),
        h("div", { class: "value", title: m.lastSeenAt ? "Last heard from " + fmtDate(m.lastSeenAt) : "Never heard from" }, presencePill(m.presence)),
        h("div", { class: "label" }, m.lastSeenAt ? "heard from " + ago(m.lastSeenAt) : "never heard from")));
    const item = (key, label, value) => h("div", { "data-field": key }, h("dt", { class: "label" }, label), h("dd", {}, value || "—"));
    identity.replaceChildren(item("serialNumber", "Serial number", m.serialNumber), item("macAddress", "MAC address", m.macAddress),
      item("modelNumber", "Model", m.modelNumber), item("firmwareRevision", "Firmware revision", m.firmwareRevision),
      item("softwareRevision", "Software revision", m.softwareRevision), item("associatedAt", "Associated", fmtDate(m.associatedAt)),
      deviceKeyItem(m.devicePublicKey));
    actions.replaceChildren();
    if (isOwner() && m.associationState === "IDLE") {
      actions.append(h("button", { class: "primary", onclick: async () => {
        try {
          showValues({ ...mount, ...(await gql(`mutation($uid: ID!) { confirmAssociation(uid: $uid) { ${MOUNT_FIELDS} } }`, { uid })).confirmAssociation });
        } catch (err) { showError(err); }
      } }, "Confirm association"));
    }
    if (isOwner() && m.associationState !== "INACTIVE") {
      actions.append(h("button", { class: "danger", id: "abandon", onclick: async () => {
        if (!confirm(`Abandon ${uid}? Its owner key is cleared and it must be associated again.`)) return;
        try {
          await gql(`mutation($uid: ID!) { abandonMount(uid: $uid) }`, { uid });
          location.hash = "#/fleet";
        } catch (err) { showError(err); }
      } }, "Abandon"));
    }
  }

  // series reads one code's history from `from` on, oldest first, and
  // whether it is all of it.
  async function series(code, from) {
    const q = `query($uid: ID!, $code: String, $from: DateTime, $p: Int!) {
      mountStates(uid: $uid, code: $code, from: $from, currentPage: $p, pageSize: 100) { states { value occurredAt } pagination { totalPages } } }`;
    const { items, complete } = await fetchPages(async (p) => {
      const d = (await gql(q, { uid, code, from, p })).mountStates;
      return { items: d.states, totalPages: d.pagination.totalPages };
    }, SERIES_PAGES);
    items.sort((a, b) => Date.parse(a.occurredAt) - Date.parse(b.occurredAt));
    return { states: items, complete };
  }

  // before reads the last value of code before `at`: where a band starts.
  async function before(code, at) {
    const d = await gql(`query($uid: ID!, $code: String, $to: DateTime) { mountStates(uid: $uid, code: $code, to: $to, pageSize: 1) { states { value occurredAt } } }`, { uid, code, to: at });
    return d.mountStates.states[0]?.value ?? null;
  }

  let historyRun = 0;
  async function loadHistory() {
    const run = ++historyRun;
    const to = Date.now() / 1000;
    const from = to - Number(periodSel.value);
    const fromISO = new Date(from * 1000).toISOString();
    const [battery, temp, ...bands] = await Promise.all([series("BATTERY_LEVEL", fromISO), series("CPU_TEMPERATURE", fromISO),
      ...BANDS.map(async ([code]) => {
        const [s, first] = await Promise.all([series(code, fromISO), before(code, fromISO)]);
        // With only the newest 1,000 loaded, what came before them is unknown.
        return { ...s, first: s.complete ? first : null };
      })]);
    if (run !== historyRun) return; // a newer load (another period) has begun
    while (plots.length) plots.pop().destroy();
    const specs = [["Battery", points(battery.states), "%"], ["CPU temperature", points(temp.states), "°C"]];
    const readouts = specs.map(() => h("span", { class: "chart-readout muted" }));
    const boxes = specs.map(([t], i) => h("div", { class: "card chart", "data-chart": t }, h("h3", {}, t, readouts[i])));
    // Lay the boxes out first, so that each plot takes its box's width.
    charts.replaceChildren(...boxes, timeline(bands, from, to, periodSel.selectedOptions[0].textContent));
    specs.forEach(([t, data, unit], i) => {
      const box = boxes[i];
      if (!data[0].length) {
        box.append(h("p", { class: "muted" }, "No reports in this period."));
        return;
      }
      // No legend (it stood empty below the chart until hovered): the
      // value under the cursor shows beside the chart's title instead.
      const readout = readouts[i];
      const showAt = (u) => {
        const at = u.cursor.idx;
        readout.textContent = at == null ? "" : `${data[1][at]} ${unit} at ${fmtDate(new Date(data[0][at] * 1000).toISOString())}`;
      };
      // The box keeps its plot (box.plot: the browser tests read its axes).
      plots.push(box.plot = new uPlot({ width: Math.max(280, box.clientWidth - 34), height: 220, legend: { show: false }, hooks: { setCursor: [showAt] },
        // The console's date format here too: the legend's time in full, the axis as HH:MM over MM-DD.
        series: [{ value: (u, v) => (v === null ? "—" : fmtDate(new Date(v * 1000).toISOString())) }, { label: t, stroke: "#2f6fde", width: 2, points: { show: data[0].length < 60 }, value: (u, v) => (v === null ? "—" : v + " " + unit) }],
        axes: [{ space: 60, values: (u, vals) => vals.map((v) => { const d = fmtDate(new Date(v * 1000).toISOString()); return d.slice(11, 16) + "\n" + d.slice(5, 10); }) }, { size: axisSize, values: (u, vals) => vals.map((v) => v + unit) }] }, data, box));
    });
  }

  // A report refreshes the history, at most every two seconds: a chatty
  // mount costs a reload now and then, not one per report. A revocation or
  // an offline use (a command's receipt) refreshes the grants likewise.
  let historyTimer = null;
  let grantsTimer = null;
  const grantsSoon = () => {
    grantsTimer ??= setTimeout(() => {
      grantsTimer = null;
      grants.reload().catch(showError);
    }, 2000);
  };
  const historySoon = () => {
    historyTimer ??= setTimeout(() => {
      historyTimer = null;
      loadHistory().catch(showError);
      firmware.reload().catch(showError);
    }, 2000);
  };

  // The audit shows where each command stands: its status (with the
  // mount's reason for a refusal), when it moved there and whether the
  // receipt was signed; a receipt or an expiry refreshes it live.
  // An install a rollout signed also shows what came of it at the mount:
  // EXECUTED says the mount took the image, the target's FAILED (a
  // rollback, no report on the new revision) says it did not keep it.
  let cmdList = [];
  async function loadCommands() {
    if (!isOwner()) return; // the audit is the owners'
    const c = await gql(`query($uid: ID!) { mountCommands(uid: $uid, pageSize: 50) { commands { id code generatedAt issuedBy issuedByName status statusAt reason verified rolloutId data } } }`, { uid });
    cmdList = c.mountCommands.commands;
    showCommands();
  }
  function showCommands() {
    const outcome = (x) => {
      const t = x.rolloutId && firmware.target(x.rolloutId);
      return t && t.commandId === x.id && t.state !== "ELIGIBLE" ? h("span", { class: "rollout-outcome" }, " — rollout: ", targetWords(t)) : "";
    };
    commands.replaceChildren(...cmdList.map((x) => h("tr", { "data-code": x.code, "data-id": x.id, "data-status": x.status },
      h("td", {}, x.code), h("td", {}, fmtDate(x.generatedAt)), h("td", {}, x.issuedByName || x.issuedBy || ""),
      h("td", { class: "wrap" }, h("span", { class: "status " + x.status }, x.status), x.reason ? ": " + x.reason : "",
        x.status === "EXECUTED" || x.status === "REFUSED" ? h("span", { class: "muted" }, x.verified ? " (signed receipt)" : " (unsigned receipt)") : "", outcome(x)),
      h("td", {}, x.statusAt ? fmtDate(x.statusAt) : "—"))));
    if (!cmdList.length) commands.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, "No commands yet.")));
    firmware.showInstalls(cmdList);
  }

  const renameForm = isOwner() ? renameCard(uid, (m) => showValues({ ...mount, ...m })) : null;
  const tagsCard = nfcCard(uid);
  const alarms = mountAlarms(uid);
  const commandForm = commandCard(uid, () => loadCommands().catch(showError), () => tagsCard.tags);
  const firmware = firmwareCard(uid, () => showCommands());
  const grants = grantsCard(uid);

  async function load() {
    const d = await gql(`query($uid: ID!) { mount(uid: $uid) { ${MOUNT_FIELDS} macAddress associatedAt devicePublicKey nfcTags { uid name } } }`, { uid });
    showValues(d.mount);
    renameForm?.fill(d.mount.name);
    tagsCard.fill(d.mount.nfcTags);
    await Promise.all([loadCommands(), loadHistory(), alarms.reload(), firmware.reload(), grants.reload()]);
  }

  main.replaceChildren(
    h("p", {}, h("a", { href: "#/fleet" }, "← Fleet")),
    h("section", { class: "card", "aria-labelledby": "mount-title" }, h("h1", { id: "mount-title" }, title, " ", h("span", { id: "mount-uid", class: "muted" }, uid)), values, actions),
    alarms.el,
    h("section", { class: "card", "aria-labelledby": "identity-title" }, h("h2", { id: "identity-title" }, "Identity"), identity, renameForm?.el ?? ""),
    h("section", { class: "card", "aria-labelledby": "history-title" }, h("div", { class: "toolbar" }, h("h2", { id: "history-title" }, "History"), field("Period", periodSel),
      // The whole history, not only the period shown (owners).
      isOwner() ? exportMenu("export-history", "Export", (f) => `/exports/states?mountUid=${encodeURIComponent(uid)}&format=${f}`, showError) : ""), charts),
    commandForm,
    grants.el,
    isOwner() ? h("section", { class: "card", "aria-labelledby": "audit-title" }, h("h2", { id: "audit-title" }, "Command audit"),
      h("p", { class: "muted" }, "The newest 50 commands issued for this mount, and where each stands: ISSUED until the mount's receipt says EXECUTED or REFUSED, UNCONFIRMED when it expired without one."),
      h("div", { class: "scroll" }, h("table", { id: "audit" }, h("thead", {}, h("tr", {}, ["Code", "Issued", "By", "Status", "Since"].map((t) => h("th", { scope: "col" }, t)))), commands))) : "",
    firmware.el,
    tagsCard.el);

  let sub = null;
  const started = loadThenLive({
    query: `subscription($uids: [ID!], $after: ID) { mountEvents(uids: $uids, after: $after) { id type uid occurredAt states { code value occurredAt } mount { ${MOUNT_FIELDS} devicePublicKey } alarm { ${ALARM_FIELDS} } } }`,
    variables: { uids: [uid] },
    onEvent: (ev) => {
      showValues(withEvent(mount, ev));
      if (ev.type === "STATES_REPORTED") historySoon();
      if (ev.alarm) alarms.upsert(ev.alarm);
      if (ev.type === "GRANT_REVOKED" || COMMAND_STATUS_EVENTS.includes(ev.type)) grantsSoon();
      if (ev.type === "COMMAND_ISSUED" || COMMAND_STATUS_EVENTS.includes(ev.type)) {
        loadCommands().catch(showError);
        firmware.reload().catch(showError); // a receipt moves a rollout's target
      }
    },
    onResync: load, onState: setConnection,
  }).then((s) => { sub = s; }, showError);
  return () => {
    historyRun++;
    clearTimeout(historyTimer);
    clearTimeout(grantsTimer);
    started.then(() => sub?.stop());
    while (plots.length) plots.pop().destroy();
  };
}

// axisSize makes a y axis as wide as its longest label ("41.25°C"), so
// that none is clipped (uPlot's demo axis-autosize).
function axisSize(u, values, axisIdx, cycleNum) {
  const axis = u.axes[axisIdx];
  if (cycleNum > 1) return axis._size; // settled: stop re-measuring
  const longest = (values ?? []).reduce((a, v) => (v.length > a.length ? v : a), "");
  let size = axis.ticks.size + axis.gap;
  if (longest) {
    u.ctx.font = axis.font[0];
    size += u.ctx.measureText(longest).width / devicePixelRatio;
  }
  return Math.ceil(size) + 2;
}

// targetWords is where a rollout stands at the mount, in words: its state,
// and for a FAILED one why ("rollback", "refused: bad image").
function targetWords(t) {
  return h("span", {}, h("span", { class: "target-state " + t.state }, t.state.toLowerCase()), t.reason ? h("span", { class: "target-reason" }, ": " + t.reason) : "");
}

const ROLLOUTS_SHOWN = 20;

// firmwareCard (owners): the rollouts the mount was a target of, newest
// first, with where each stands at it (mountRollouts), and the firmware
// installs among the newest commands, each with its outcome: a rollout's
// target says more than the install's receipt (EXECUTED, then a rollback).
function firmwareCard(uid, onChange) {
  const rolloutRows = h("tbody");
  const installRows = h("tbody");
  const more = h("p", { class: "muted", id: "mount-rollouts-more" });
  let targets = new Map();
  let installs = [];
  let seq = 0;
  async function reload() {
    if (!isOwner()) return; // rollouts are the owners'
    const n = ++seq;
    const d = (await gql(`query($uid: ID!, $n: Int!) { mountRollouts(uid: $uid, pageSize: $n) { rollouts { rollout { id softwareRevision state createdAt }
      target { state phase commandId installingSince reason updatedAt } } pagination { totalItems } } }`, { uid, n: ROLLOUTS_SHOWN })).mountRollouts;
    if (n !== seq) return;
    targets = new Map(d.rollouts.map((x) => [x.rollout.id, x.target]));
    rolloutRows.replaceChildren(...d.rollouts.map(({ rollout: r, target: t }) => h("tr", { "data-rollout": r.id, "data-state": t.state, "data-reason": t.reason || "" },
      h("td", {}, h("a", { href: "#/rollouts/" + encodeURIComponent(r.id) }, r.softwareRevision)),
      h("td", { class: "wrap" }, targetWords(t)),
      h("td", {}, fmtDate(t.updatedAt)),
      h("td", {}, r.state.toLowerCase()),
      h("td", {}, fmtDate(r.createdAt)))));
    if (!d.rollouts.length) rolloutRows.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, "No rollout has targeted this mount.")));
    more.textContent = d.pagination.totalItems > d.rollouts.length ? `The newest ${d.rollouts.length} of ${d.pagination.totalItems} rollouts.` : "";
    onChange();
  }
  function showInstalls(commands) {
    installs = commands.filter((c) => c.code === "INSTALL_FIRMWARE");
    installRows.replaceChildren(...installs.map((c) => {
      const t = c.rolloutId && targets.get(c.rolloutId);
      const mine = t && t.commandId === c.id;
      return h("tr", { "data-id": c.id, "data-status": c.status, "data-outcome": mine ? t.state : "" },
        h("td", {}, c.data?.revision ?? "—"),
        h("td", {}, fmtDate(c.generatedAt)),
        h("td", {}, c.rolloutId ? h("a", { href: "#/rollouts/" + encodeURIComponent(c.rolloutId) }, "rollout") : "by hand"),
        h("td", { class: "wrap" }, h("span", { class: "status " + c.status }, c.status), c.reason ? ": " + c.reason : ""),
        h("td", { class: "wrap" }, mine ? targetWords(t) : "—"));
    }));
    if (!installs.length) installRows.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, "No firmware install among the newest 50 commands.")));
  }
  const table = (id, caption, cols, body) => h("div", { class: "scroll" }, h("table", { id }, h("caption", {}, caption),
    h("thead", {}, h("tr", {}, cols.map((t) => h("th", { scope: "col" }, t)))), body));
  const el = isOwner() ? h("section", { class: "card", id: "mount-firmware", "aria-labelledby": "firmware-title" }, h("h2", { id: "firmware-title" }, "Firmware and rollouts"),
    h("p", { class: "muted" }, "The rollouts that targeted this mount, newest first, and where each stands here: a rollout decides a mount HEALTHY on a signed report on the new revision, FAILED on a refusal, a rollback or no such report."),
    table("mount-rollouts", "Rollouts", ["Version", "At this mount", "Since", "Rollout", "Started"], rolloutRows), more,
    table("firmware-installs", "Firmware installs", ["Revision", "Signed", "For", "Receipt", "Outcome"], installRows)) : "";
  return { el, reload, showInstalls, target: (id) => targets.get(id) };
}

// points makes a chart's [xs, ys]: uPlot wants x ascending; equal instants keep one point.
function points(states) {
  const xs = [], ys = [];
  for (const s of states) {
    const x = Date.parse(s.occurredAt) / 1000;
    if (xs.length && xs[xs.length - 1] === x) ys[ys.length - 1] = Number(s.value);
    else { xs.push(x); ys.push(Number(s.value)); }
  }
  return [xs, ys];
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  el.append(...children);
  return el;
}

// timeline draws the lock and the helmet as bands over [from, to] (Unix
// seconds): one row each, a band per stretch of one value. The bands are a
// picture; the summary (its label) and the list of changes say the same in words.
function timeline(bands, from, to, period) {
  const rows = [], summary = [], changes = [];
  BANDS.forEach(([code, label, yes, no], i) => {
    const { states, first, complete } = bands[i];
    const word = (v) => (v === "1" ? yes : v === "0" ? no : "unknown");
    const segs = [];
    let cur = first, start = from;
    for (const s of states) {
      if (s.value === cur) continue;
      const t = Math.max(from, Date.parse(s.occurredAt) / 1000);
      if (t > start) segs.push([start, t, cur]);
      changes.push({ at: s.occurredAt, label, value: word(s.value) });
      cur = s.value;
      start = t;
    }
    segs.push([start, to, cur]);
    const share = (v) => Math.round((100 * segs.filter((s) => s[2] === v).reduce((n, s) => n + s[1] - s[0], 0)) / (to - from));
    const n = changes.filter((c) => c.label === label).length;
    summary.push(`${label}: ${yes.toLowerCase()} ${share("1")}%, ${no.toLowerCase()} ${share("0")}% of the ${period}, ${n} change${n === 1 ? "" : "s"}, ${word(cur).toLowerCase()} now${complete ? "" : " (the newest 1,000 reports)"}.`);
    const bar = svg("svg", { class: "tl-bar", viewBox: "0 0 1000 10", preserveAspectRatio: "none", "aria-hidden": "true", focusable: "false" },
      ...segs.map(([a, b, v]) => svg("rect", { x: ((a - from) / (to - from)) * 1000, y: 0, width: Math.max(0.5, ((b - a) / (to - from)) * 1000), height: 10,
        class: "tl-" + (v === "1" ? "on" : v === "0" ? "off" : "unknown"), "data-value": v ?? "" },
      svg("title", {}, `${word(v)} ${fmtDate(new Date(a * 1000).toISOString())} – ${fmtDate(new Date(b * 1000).toISOString())}`))));
    rows.push(h("div", { class: "tl-row", "data-code": code }, h("span", { class: "tl-label" }, label), bar));
  });
  changes.sort((a, b) => Date.parse(b.at) - Date.parse(a.at));
  const swatch = (cls, text) => h("span", {}, h("i", { class: "tl-swatch tl-" + cls }), text);
  return h("div", { class: "card chart", id: "timeline" }, h("h3", { id: "timeline-title" }, "Lock and helmet"),
    h("div", { role: "img", "aria-labelledby": "timeline-title", "aria-describedby": "timeline-summary" }, rows,
      h("div", { class: "tl-axis", "aria-hidden": "true" }, h("span", { class: "tl-label" }), h("span", {}, fmtDate(new Date(from * 1000).toISOString())), h("span", {}, "now"))),
    h("p", { class: "tl-legend muted" }, swatch("on", "locked / present"), swatch("off", "unlocked / absent"), swatch("unknown", "not reported")),
    h("p", { id: "timeline-summary", class: "sr-only" }, summary.join(" ")),
    h("details", { id: "timeline-changes" }, h("summary", {}, `${changes.length} change${changes.length === 1 ? "" : "s"} in the ${period}`),
      changes.length ? h("div", { class: "scroll tl-list" }, h("table", {}, h("thead", {}, h("tr", {}, ["When", "What", "Now"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, changes.map((c) => h("tr", {}, h("td", {}, fmtDate(c.at)), h("td", {}, c.label), h("td", {}, c.value)))))) : h("p", { class: "muted" }, "No changes.")));
}

// renameCard: an owner renames the mount (updateMount, PATCH /mounts/{uid}).
function renameCard(uid, onRenamed) {
  // A reload (after a reconnect) leaves a name being typed alone.
  let edited = false;
  const input = h("input", { id: "rename-input", name: "name", autocomplete: "off", "aria-describedby": "rename-status", oninput: () => { edited = true; } });
  const status = statusBox("rename-status");
  const el = h("form", { class: "toolbar inline-form", id: "rename", onsubmit: async (e) => {
    e.preventDefault();
    input.removeAttribute("aria-invalid");
    try {
      const m = (await gql(`mutation($uid: ID!, $name: String!) { updateMount(uid: $uid, input: { name: $name }) { ${MOUNT_FIELDS} } }`, { uid, name: input.value.trim() })).updateMount;
      onRenamed(m);
      input.value = m.name;
      edited = false;
      status.say(`Renamed to “${m.name}”.`);
    } catch (err) {
      input.setAttribute("aria-invalid", "true");
      status.say(errorText(err), true);
      input.focus();
    }
  } }, field("Name", input), h("button", { class: "primary", type: "submit" }, "Rename"), status);
  return { el, fill: (name) => { if (!edited) input.value = name; } };
}

// commandCard: choose a code and its parameters, get the signed command a
// phone carries to the mount (issueCommand, GET /mounts/{uid}/query).
// Restricted users may ask for commands for their mounts too.
function commandCard(uid, onIssued, knownTags) {
  const codeSel = h("select", { id: "command-code", name: "code", onchange: () => showParams() }, Object.keys(COMMANDS).map((c) => h("option", { value: c }, c)));
  const params = h("div", { class: "params" });
  const tagList = h("datalist", { id: "command-tags" });
  const status = statusBox("command-status");
  const out = h("div", { id: "signed-command" });
  function showParams() {
    params.replaceChildren(...COMMANDS[codeSel.value].map(([name, label, vals]) => field(label, vals
      ? h("select", { id: "param-" + name, name }, vals.map((v) => h("option", { value: v }, v)))
      : h("input", { id: "param-" + name, name, required: true, autocomplete: "off", spellcheck: "false", list: "command-tags", placeholder: "04:A2:2B:1A", onfocus: showTags }))));
  }
  // The mount's tags, offered as the tag uid's choices.
  function showTags() {
    tagList.replaceChildren(...knownTags().map((t) => h("option", { value: t.uid }, t.name)));
  }
  showParams();
  const form = h("form", { id: "command-form", onsubmit: async (e) => {
    e.preventDefault();
    const values = {};
    for (const c of params.querySelectorAll("input, select")) values[c.name] = c.value.trim();
    try {
      const [cmd] = (await gql(`mutation($uid: ID!, $code: String!, $params: CommandParamsInput) {
        issueCommand(uid: $uid, code: $code, params: $params) { code data generatedAt payload signedToken } }`, { uid, code: codeSel.value, params: values })).issueCommand;
      status.say(`${cmd.code} signed at ${fmtDate(cmd.generatedAt)}; the mount takes it until ${fmtDate(cmd.data.expiresAt)}.`);
      showCommand(cmd);
      onIssued();
    } catch (err) {
      out.replaceChildren();
      status.say(errorText(err), true);
    }
  } }, h("div", { class: "toolbar" }, field("Command", codeSel), params, h("button", { class: "primary", type: "submit" }, "Sign command")), tagList, status);

  function showCommand(cmd) {
    const text = JSON.stringify(cmd, null, 2);
    const area = h("textarea", { id: "command-text", readonly: true, rows: Math.min(14, text.split("\n").length), spellcheck: "false" }, text);
    const copied = statusBox("command-copied");
    out.replaceChildren(h("h3", {}, "The signed command to carry"),
      h("p", { class: "muted" }, "A phone writes it to the mount over Bluetooth within five minutes; the mount checks the signature against its owner key."),
      field("Command (JSON)", area),
      h("div", { class: "toolbar" }, h("button", { type: "button", id: "command-copy", onclick: async () => {
        try {
          // A browser that neither grants nor refuses (no focus, no
          // permission prompt) counts as a refusal after a second.
          await Promise.race([navigator.clipboard.writeText(text), new Promise((_, no) => setTimeout(no, 1000))]);
        } catch {
          // No clipboard outside a secure context: select it for Ctrl+C.
          area.focus();
          area.select();
          return copied.say("Selected: press Ctrl+C (⌘C) to copy.");
        }
        copied.say("Copied.");
      } }, "Copy"), copied),
      h("dl", { class: "command-parts" }, h("dt", {}, "Payload"), h("dd", {}, h("code", { id: "command-payload" }, cmd.payload)),
        h("dt", {}, "Signature"), h("dd", {}, h("code", { id: "command-signature" }, cmd.signedToken ?? "—"))));
  }
  return h("section", { class: "card", "aria-labelledby": "command-title" }, h("h2", { id: "command-title" }, "Issue a command"),
    h("p", { class: "muted" }, "For an associated mount. Each command is signed with the mount's owner key and recorded in the audit."), form, out);
}

// nfcCard: the tags the mount accepts. Owners edit the list (uid and
// name) and synchronise it: syncNfcTags makes the mount's set exactly the
// list, then updateNfcTag names the tags whose name changed.
function nfcCard(uid) {
  const list = h("ul", { id: "nfc-tags", class: "tag-list" });
  const status = statusBox("nfc-status");
  let tags = [];
  let rowSeq = 0;
  // A reload (after a reconnect) leaves a list being edited alone.
  let edited = false;
  const row = (t = { uid: "", name: "" }) => {
    const n = ++rowSeq;
    const u = h("input", { id: `tag-uid-${n}`, name: "uid", value: t.uid, autocomplete: "off", spellcheck: "false", placeholder: "04:A2:2B:1A", "aria-describedby": "nfc-status" });
    const name = h("input", { id: `tag-name-${n}`, name: "tagName", value: t.name, autocomplete: "off" });
    const li = h("li", { class: "toolbar" }, field("Tag uid", u), field("Tag name", name),
      h("button", { type: "button", class: "danger", "aria-label": `Remove tag ${t.uid || n}`, onclick: () => { edited = true; li.remove(); list.querySelector("input")?.focus(); } }, "Remove"));
    return li;
  };
  const fill = (ts, force = false) => {
    tags = ts;
    if (edited && !force) return;
    edited = false;
    if (!isOwner()) {
      list.replaceChildren(...(ts.length ? ts.map((t) => h("li", {}, `${t.name || t.uid} (${t.uid})`)) : [h("li", { class: "muted" }, "none")]));
      return;
    }
    list.replaceChildren(...ts.map(row));
  };
  const reload = async () => fill((await gql(`query($uid: ID!) { mount(uid: $uid) { nfcTags { uid name } } }`, { uid })).mount.nfcTags, true);

  async function sync(e) {
    e.preventDefault();
    const rows = [...list.children].map((li) => ({ li, uid: li.querySelector("[name=uid]"), name: li.querySelector("[name=tagName]") }))
      .filter((r) => r.uid.value.trim() || r.name.value.trim());
    for (const r of rows) r.uid.removeAttribute("aria-invalid");
    const bad = (r, text) => {
      r.uid.setAttribute("aria-invalid", "true");
      r.uid.focus();
      status.say(text, true);
    };
    if (rows.length > MAX_TAGS) return status.say(`A mount takes at most ${MAX_TAGS} tags.`, true);
    const empty = rows.find((r) => !r.uid.value.trim());
    if (empty) return bad(empty, `The tag named “${empty.name.value.trim()}” has no uid.`);
    const long = rows.find((r) => [...r.name.value.trim()].length > 100);
    if (long) return bad(long, `The name of tag ${long.uid.value.trim()} must be at most 100 characters.`);
    try {
      const res = (await gql(`mutation($m: ID!, $t: [String!]!) { syncNfcTags(mountUid: $m, tagUids: $t) { added removed } }`,
        { m: uid, t: rows.map((r) => r.uid.value.trim()) })).syncNfcTags;
      const linked = new Map((await gql(`query($uid: ID!) { mount(uid: $uid) { nfcTags { uid name } } }`, { uid })).mount.nfcTags.map((t) => [t.uid, t]));
      let named = 0;
      for (const r of rows) {
        const key = tagKey(r.uid.value.trim());
        const want = r.name.value.trim();
        if (linked.has(key) && linked.get(key).name !== want) {
          await gql(`mutation($uid: ID!, $name: String!) { updateNfcTag(uid: $uid, input: { name: $name }) { uid } }`, { uid: key, name: want });
          named++;
        }
      }
      await reload();
      status.say(`Synchronised: ${res.added} added, ${res.removed} removed${named ? `, ${named} renamed` : ""}.`);
    } catch (err) {
      // A bad uid names its place in the list: tagUids[2].
      const at = err.fields?.map((f) => f.field.match(/^tagUids\[(\d+)\]$/)).find(Boolean);
      const r = at && rows[Number(at[1])];
      if (r) return bad(r, `Tag ${r.uid.value.trim()} ${err.fields.find((f) => f.field === at[0]).message}.`);
      status.say(errorText(err), true);
    }
  }

  const el = h("section", { class: "card", "aria-labelledby": "nfc-title" }, h("h2", { id: "nfc-title" }, "NFC tags"),
    isOwner()
      ? h("form", { id: "nfc-form", onsubmit: sync, oninput: () => { edited = true; } },
        h("p", { class: "muted" }, "The tags this mount accepts. Synchronising makes the mount's list exactly this one (the mount must be associated); carry a SYNC_NFC_TAGS command to it afterwards."),
        list,
        h("div", { class: "toolbar" }, h("button", { type: "button", id: "nfc-add", onclick: () => { edited = true; const li = row(); list.append(li); li.querySelector("input").focus(); } }, "Add a tag"),
          h("button", { class: "primary", type: "submit", id: "nfc-sync" }, "Synchronise tags")), status)
      : list);
  return { el, fill, get tags() { return tags; } };
}
