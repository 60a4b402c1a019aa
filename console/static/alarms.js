// Alarms: the account's alarms live (#/alarms, active first, acknowledged
// by owners), a mount's alarms on its page, the count of active alarms in
// the header, and the rules that raise them (#/alarm-rules, owners), with
// the starting rules mountd suggests offered one click each.
import { gql, live, loadThenLive, APIError } from "./api.js";
import { h, main, session, isOwner, fmtDate, ago, showError, setConnection, errorText, statusBox, field, canReadAlarms } from "./ui.js";

export const ALARM_FIELDS = "id ruleId ruleName uid severity state raisedAt clearedAt acknowledgedAt acknowledgedBy acknowledgedByName values";
const RULE_FIELDS = "id name severity conditions { code op value presence } forSeconds mountUids enabled";

const SEVERITIES = ["CRITICAL", "WARNING", "INFO"];
const SEVERITY_RANK = { CRITICAL: 0, WARNING: 1, INFO: 2 };
const OPS = ["<", "<=", ">", ">=", "==", "!="];
// The values a condition compares: code, label, unit, or the words for 1 and 0.
const CODES = {
  BATTERY_LEVEL: { label: "Battery", unit: "%" },
  CPU_TEMPERATURE: { label: "CPU temperature", unit: " °C" },
  MOUNT_LOCKED: { label: "Lock", words: ["Unlocked", "Locked"] },
  HELMET_MOUNTED: { label: "Helmet", words: ["Absent", "Present"] },
};
const MAX_CONDITIONS = 10;
// What the alarms page keeps: the active ones (all, up to a page of 100)
// and the newest cleared ones.
const ACTIVE_PAGE = 100, CLEARED_SHOWN = 50;

export const severityPill = (s) => h("span", { class: "pill severity " + s }, s.toLowerCase());

// valueText: a state value as the console shows it (15%, 41.5 °C, Locked).
function valueText(code, v) {
  const c = CODES[code];
  if (!c) return v;
  if (c.words) return c.words[Number(v)] ?? v;
  return v + c.unit;
}

// conditionText: "Battery < 20%", "Helmet is Absent", "Offline".
export function conditionText(c) {
  if (c.presence) return c.presence === "OFFLINE" ? "Offline" : `Presence ${c.presence.toLowerCase()}`;
  const code = CODES[c.code];
  if (code?.words && (c.op === "==" || c.op === "!=")) return `${code.label} ${c.op === "==" ? "is" : "is not"} ${valueText(c.code, c.value)}`;
  return `${code?.label ?? c.code} ${c.op} ${valueText(c.code, c.value)}`;
}

const rulesText = (conditions) => conditions.map(conditionText).join(" and ");

function durationText(s) {
  if (!s) return "at once";
  if (s % 3600 === 0) return `for ${s / 3600} h`;
  if (s % 60 === 0) return `for ${s / 60} min`;
  return `for ${s} s`;
}

// valuesText: the values an alarm was raised on, short: "Battery 15%, CPU 41.5 °C, Locked, Helmet absent".
function valuesText(values) {
  const v = values || {};
  const out = [];
  if (v.BATTERY_LEVEL !== undefined) out.push(`Battery ${valueText("BATTERY_LEVEL", v.BATTERY_LEVEL)}`);
  if (v.CPU_TEMPERATURE !== undefined) out.push(`CPU ${valueText("CPU_TEMPERATURE", v.CPU_TEMPERATURE)}`);
  if (v.MOUNT_LOCKED !== undefined) out.push(valueText("MOUNT_LOCKED", v.MOUNT_LOCKED));
  if (v.HELMET_MOUNTED !== undefined) out.push(`Helmet ${valueText("HELMET_MOUNTED", v.HELMET_MOUNTED).toLowerCase()}`);
  return out.join(", ");
}

// Active first (the most severe first), then cleared; newest first in each.
function byUrgency(a, b) {
  if (a.state !== b.state) return a.state === "ACTIVE" ? -1 : 1;
  if (a.state === "ACTIVE" && a.severity !== b.severity) return SEVERITY_RANK[a.severity] - SEVERITY_RANK[b.severity];
  return a.raisedAt < b.raisedAt ? 1 : a.raisedAt > b.raisedAt ? -1 : 0;
}

// alarmTable: a table of alarms; for owners an active alarm not yet
// acknowledged has its Acknowledge button in the Acknowledged column, so
// that the button is where its answer will be and the table is no wider
// for it. set() replaces its alarms, upsert() takes one that moved. Under
// 700 px wide each alarm is a card (style.css, table.alarms).
export function alarmTable(id, { withMount = true, empty = "No alarms." } = {}) {
  const tbody = h("tbody");
  const alarms = new Map();
  const status = statusBox(id + "-status");
  const headings = ["Severity", ...(withMount ? ["Mount"] : []), "Rule", "Raised", "Values when raised", "State", "Acknowledged"];
  const table = h("table", { id, class: "alarms" }, h("thead", {}, h("tr", {}, headings.map((t) => h("th", { scope: "col" }, t)))), tbody);

  async function acknowledge(a, button) {
    button.disabled = true;
    try {
      const d = await gql(`mutation($id: ID!) { acknowledgeAlarm(id: $id) { ${ALARM_FIELDS} } }`, { id: a.id });
      upsert(d.acknowledgeAlarm);
      status.say(`Acknowledged “${a.ruleName}” on ${a.uid}.`);
    } catch (err) {
      button.disabled = false;
      status.say(errorText(err), true);
    }
  }

  function ackCell(a) {
    if (a.acknowledgedAt) {
      const by = !a.acknowledgedBy ? "" : a.acknowledgedBy === session.sub ? " by you" : ` by ${a.acknowledgedByName || a.acknowledgedBy}`;
      return h("span", { title: fmtDate(a.acknowledgedAt) }, ago(a.acknowledgedAt), by ? h("span", { class: "muted" }, by) : "");
    }
    if (a.state !== "ACTIVE") return h("span", { class: "muted" }, "—");
    if (!isOwner()) return h("span", { class: "muted" }, "not yet");
    const button = h("button", { type: "button", "data-action": "acknowledge", "aria-label": `Acknowledge “${a.ruleName}” on ${a.uid}` }, "Acknowledge");
    button.onclick = () => acknowledge(a, button);
    return button;
  }

  // Each cell carries its heading (data-label), which the cards show.
  function row(a) {
    const cells = [
      h("td", { class: "severity" }, severityPill(a.severity)),
      withMount ? h("td", { class: "mount" }, h("a", { href: "#/mounts/" + encodeURIComponent(a.uid) }, a.uid)) : null,
      h("td", { class: "rule" }, a.ruleName),
      h("td", { "data-label": "Raised", title: fmtDate(a.raisedAt) }, fmtDate(a.raisedAt)),
      h("td", { class: "wrap values", "data-label": "Values" }, valuesText(a.values) || "—"),
      h("td", { class: "state", "data-label": "State" }, h("span", { class: "alarm-state " + a.state }, a.state === "ACTIVE" ? "active" : "cleared"),
        a.clearedAt ? h("span", { class: "muted", title: fmtDate(a.clearedAt) }, " " + ago(a.clearedAt)) : ""),
      h("td", { class: "ack", "data-label": "Acknowledged" }, ackCell(a)),
    ];
    return h("tr", { "data-id": a.id, "data-state": a.state, "data-severity": a.severity, "data-uid": a.uid, class: a.state === "ACTIVE" ? "alarm-active " + a.severity : "" }, cells);
  }

  function render() {
    const list = [...alarms.values()].sort(byUrgency);
    // The newest cleared ones only: the active ones are what matter.
    let cleared = 0;
    const shown = list.filter((a) => a.state === "ACTIVE" || ++cleared <= CLEARED_SHOWN);
    for (const a of list) if (!shown.includes(a)) alarms.delete(a.id);
    tbody.replaceChildren(...shown.map(row));
    if (!shown.length) tbody.append(h("tr", {}, h("td", { colspan: headings.length, class: "empty" }, empty)));
  }

  function upsert(a) {
    alarms.set(a.id, a);
    render();
  }
  function set(list) {
    alarms.clear();
    for (const a of list) alarms.set(a.id, a);
    render();
  }
  return { el: h("div", {}, status, h("div", { class: "scroll" }, table)), set, upsert, get alarms() { return [...alarms.values()]; } };
}

// ---------- #/alarms ----------

export function alarmsView(query) {
  const sevSel = h("select", { id: "alarm-severity" }, h("option", { value: "" }, "Any severity"), SEVERITIES.map((s) => h("option", { value: s }, s.toLowerCase())));
  const mountIn = h("input", { type: "search", id: "alarm-mount", placeholder: "Mount uid", autocomplete: "off", spellcheck: "false", maxlength: 64 });
  const counts = h("div", { class: "counts", id: "alarm-counts", "aria-live": "polite" });
  const table = alarmTable("alarms", { empty: "No alarms match." });
  let filters = { severity: "", mount: "" };

  const matches = (a) => (!filters.severity || a.severity === filters.severity) && (!filters.mount || a.uid === filters.mount);
  function showCounts() {
    const active = table.alarms.filter((a) => a.state === "ACTIVE");
    const by = (s) => active.filter((a) => a.severity === s).length;
    counts.replaceChildren(h("span", {}, h("b", { id: "alarms-active" }, active.length), " active"),
      ...SEVERITIES.map((s) => h("span", {}, h("b", {}, by(s)), " " + s.toLowerCase())),
      h("span", {}, h("b", { id: "alarms-unacknowledged" }, active.filter((a) => !a.acknowledgedAt).length), " not acknowledged"));
  }

  let loading = 0;
  async function load() {
    const run = ++loading;
    const vars = { sev: filters.severity || null, m: filters.mount || null };
    const d = await gql(`query($sev: AlarmSeverity, $m: ID) {
      active: alarms(state: ACTIVE, severity: $sev, mountUid: $m, pageSize: 100) { alarms { ${ALARM_FIELDS} } pagination { totalItems } }
      cleared: alarms(state: CLEARED, severity: $sev, mountUid: $m, pageSize: 50) { alarms { ${ALARM_FIELDS} } } }`, vars);
    if (run !== loading) return; // other filters since
    table.set([...d.active.alarms, ...d.cleared.alarms]);
    more.hidden = d.active.pagination.totalItems <= ACTIVE_PAGE;
    more.textContent = `The ${ACTIVE_PAGE} newest of ${d.active.pagination.totalItems} active alarms are shown.`;
    showCounts();
  }
  const more = h("p", { class: "muted", hidden: true });

  const read = (q) => {
    filters = { severity: SEVERITIES.includes(q.get("severity")) ? q.get("severity") : "", mount: (q.get("mount") || "").slice(0, 64) };
    sevSel.value = filters.severity;
    if (mountIn.value.trim() !== filters.mount) mountIn.value = filters.mount;
    load().catch(showError);
  };
  const write = () => {
    const q = new URLSearchParams();
    if (sevSel.value) q.set("severity", sevSel.value);
    if (mountIn.value.trim()) q.set("mount", mountIn.value.trim());
    location.hash = "#/alarms" + (q.size ? "?" + q : "");
  };
  sevSel.onchange = write;
  mountIn.onchange = write;

  main.replaceChildren(h("section", { class: "card", "aria-labelledby": "alarms-title" },
    h("div", { class: "title" }, h("h1", { id: "alarms-title" }, "Alarms"),
      isOwner() ? h("a", { class: "button", href: "#/alarm-rules" }, "Alarm rules") : ""),
    h("p", { class: "muted" }, "Raised by the account's alarm rules when their conditions hold on a mount; live, active ones first. ",
      isOwner() ? "Acknowledging says someone is on it: the alarm stays active until its conditions end." : ""),
    h("div", { class: "toolbar", role: "search", "aria-label": "Filter the alarms" }, field("Severity", sevSel), field("Mount", mountIn)),
    counts, more, table.el));
  read(query);

  const sub = live({
    query: `subscription($after: ID) { mountEvents(after: $after) { id type uid alarm { ${ALARM_FIELDS} } } }`,
    onEvent: (ev) => {
      if (!ev.alarm || !matches(ev.alarm)) return;
      table.upsert(ev.alarm);
      showCounts();
    },
    onResync: load, onState: setConnection,
  });
  return { update: read, stop: () => sub.stop() };
}

// mountAlarms: the alarms of one mount, for its page (alarm readers);
// reload() after an alarm event of the mount.
export function mountAlarms(uid) {
  if (!canReadAlarms()) return { el: "", reload: async () => {}, upsert: () => {} };
  const table = alarmTable("mount-alarms", { withMount: false, empty: "No alarms for this mount." });
  const reload = async () => {
    const d = await gql(`query($m: ID!) {
      active: alarms(state: ACTIVE, mountUid: $m, pageSize: 20) { alarms { ${ALARM_FIELDS} } }
      cleared: alarms(state: CLEARED, mountUid: $m, pageSize: 10) { alarms { ${ALARM_FIELDS} } } }`, { m: uid });
    table.set([...d.active.alarms, ...d.cleared.alarms]);
  };
  const el = h("section", { class: "card", "aria-labelledby": "mount-alarms-title" }, h("h2", { id: "mount-alarms-title" }, "Alarms"),
    h("p", { class: "muted" }, "Active ones and the newest cleared ones; ", h("a", { href: "#/alarms?mount=" + encodeURIComponent(uid) }, "all of this mount's alarms"), "."),
    table.el);
  return { el, reload, upsert: table.upsert };
}

// ---------- the header's count ----------

// alarmBadge keeps the header's count of active alarms live: recounted
// (one small query) after an alarm is raised or cleared, at most twice a
// second. It returns a stop function.
export function alarmBadge() {
  const el = document.getElementById("alarm-count");
  if (!canReadAlarms()) {
    el.hidden = true;
    return () => {};
  }
  let timer = null;
  const recount = async () => {
    const n = (await gql(`{ alarms(state: ACTIVE, pageSize: 1) { pagination { totalItems } } }`)).alarms.pagination.totalItems;
    el.hidden = false;
    el.dataset.count = n;
    el.classList.toggle("attention", n > 0);
    el.textContent = n === 1 ? "1 active alarm" : `${n} active alarms`;
  };
  const soon = () => {
    timer ??= setTimeout(() => {
      timer = null;
      recount().catch(() => {});
    }, 500);
  };
  const sub = { stop: () => {} };
  loadThenLive({
    query: `subscription($after: ID) { mountEvents(after: $after) { id type } }`,
    onEvent: (ev) => { if (ev.type === "ALARM_RAISED" || ev.type === "ALARM_CLEARED") soon(); },
    onResync: recount, onState: () => {},
  }).then((s) => Object.assign(sub, s), () => {});
  return () => {
    clearTimeout(timer);
    sub.stop();
  };
}

// ---------- #/alarm-rules ----------

// conditionRow: one condition being written: what (a value or presence),
// the comparison and the value; a lock or helmet value is chosen by word.
function conditionRow(n, c = { code: "BATTERY_LEVEL", op: "<", value: "" }, onRemove) {
  const li = h("li", { class: "toolbar condition" });
  const what = h("select", { id: `cond-code-${n}`, name: "code" },
    Object.entries(CODES).map(([code, { label }]) => h("option", { value: code }, label)), h("option", { value: "PRESENCE" }, "Presence"));
  what.value = c.presence ? "PRESENCE" : c.code;
  const rest = h("span", { class: "params" });
  function show() {
    const code = what.value;
    if (code === "PRESENCE") {
      rest.replaceChildren(h("span", { class: "field" }, h("span", { class: "label" }, "\u00a0"), h("span", {}, "is offline")));
      return;
    }
    const words = CODES[code].words;
    const op = h("select", { id: `cond-op-${n}`, name: "op" }, (words ? ["==", "!="] : OPS).map((o) => h("option", { value: o }, words ? (o === "==" ? "is" : "is not") : o)));
    op.value = (words ? ["==", "!="] : OPS).includes(c.op) ? c.op : words ? "==" : "<";
    const value = words
      ? h("select", { id: `cond-value-${n}`, name: "value" }, words.map((w, i) => h("option", { value: String(i) }, w)))
      : h("input", { id: `cond-value-${n}`, name: "value", inputmode: "decimal", required: true, size: 6, autocomplete: "off", value: c.value ?? "" });
    if (words) value.value = c.value === "1" ? "1" : "0";
    rest.replaceChildren(field("Comparison", op), field(code === "BATTERY_LEVEL" ? "Value (%)" : code === "CPU_TEMPERATURE" ? "Value (°C)" : "Value", value));
  }
  what.onchange = () => {
    c = { code: what.value, op: "", value: "" };
    show();
  };
  show();
  li.append(field("Condition " + n, what), rest,
    h("button", { type: "button", class: "danger", "aria-label": `Remove condition ${n}`, onclick: () => onRemove(li) }, "Remove"));
  li.condition = () => {
    if (what.value === "PRESENCE") return { presence: "OFFLINE" };
    return { code: what.value, op: li.querySelector("[name=op]").value, value: li.querySelector("[name=value]").value.trim() };
  };
  return li;
}

export function alarmRulesView() {
  const tbody = h("tbody");
  const status = statusBox("rules-status");
  const suggestedList = h("ul", { class: "suggestions", id: "suggested-rules" });
  const suggested = h("details", { id: "suggested" }, h("summary", {}, "Suggested starting rules"),
    h("p", { class: "muted" }, "Rules many operators start with. Nothing is created until you add one; change or delete it afterwards as you like."),
    suggestedList);
  let rules = [];
  let suggestions = [];

  function row(r) {
    const act = (action, label, onclick, cls) => h("button", { type: "button", "data-action": action, class: cls, onclick, "aria-label": `${label} “${r.name}”` }, label);
    return h("tr", { "data-id": r.id, "data-enabled": String(r.enabled) },
      h("td", { class: "wrap" }, r.name), h("td", {}, severityPill(r.severity)),
      h("td", { class: "wrap" }, rulesText(r.conditions)), h("td", {}, durationText(r.forSeconds)),
      h("td", { class: "wrap" }, r.mountUids.join(", ") || "all"),
      h("td", {}, h("span", { class: "pill " + (r.enabled ? "ASSOCIATED" : "INACTIVE") }, r.enabled ? "enabled" : "disabled")),
      h("td", {}, h("div", { class: "actions" },
        act("edit", "Edit", () => edit(r)),
        act("toggle", r.enabled ? "Disable" : "Enable", () => update(r, { enabled: !r.enabled })),
        act("delete", "Delete", () => remove(r), "danger"))));
  }

  function render() {
    tbody.replaceChildren(...rules.map(row));
    if (!rules.length) tbody.append(h("tr", {}, h("td", { colspan: 7, class: "empty" }, "No alarm rules yet: add one below, or start with a suggested one.")));
    const names = new Set(rules.map((r) => r.name));
    suggestedList.replaceChildren(...suggestions.map((s, i) => {
      const added = names.has(s.name);
      return h("li", { "data-suggestion": i },
        h("div", {}, h("b", {}, s.name), " ", severityPill(s.severity)),
        h("div", { class: "muted" }, rulesText(s.conditions), " ", durationText(s.forSeconds), ", on every mount"),
        h("button", { type: "button", class: added ? "" : "primary", disabled: added, "data-action": "add-suggested", "aria-label": `${added ? "Added" : "Add"} the rule “${s.name}”`,
          onclick: () => create({ name: s.name, severity: s.severity, forSeconds: s.forSeconds,
            conditions: s.conditions.map((c) => (c.presence ? { presence: c.presence } : { code: c.code, op: c.op, value: c.value })) }) }, added ? "Added" : "Add"));
    }));
  }

  async function load(first) {
    const d = await gql(`{ alarmRules(pageSize: 50) { rules { ${RULE_FIELDS} } } suggestedAlarmRules { name severity conditions { code op value presence } forSeconds } }`);
    rules = d.alarmRules.rules;
    suggestions = d.suggestedAlarmRules;
    // Offered when the account has none; there to open at any time.
    if (first && !rules.length) suggested.open = true;
    render();
  }

  async function create(input) {
    try {
      const r = (await gql(`mutation($in: CreateAlarmRuleInput!) { createAlarmRule(input: $in) { ${RULE_FIELDS} } }`, { in: input })).createAlarmRule;
      rules = [...rules, r];
      render();
      status.say(`Added the rule “${r.name}”.`);
      return true;
    } catch (err) {
      status.say(errorText(err), true);
      return false;
    }
  }

  async function update(r, input) {
    try {
      const u = (await gql(`mutation($id: ID!, $in: UpdateAlarmRuleInput!) { updateAlarmRule(id: $id, input: $in) { ${RULE_FIELDS} } }`, { id: r.id, in: input })).updateAlarmRule;
      rules = rules.map((x) => (x.id === r.id ? u : x));
      render();
      status.say(`${u.enabled ? "Enabled" : "Disabled"} “${u.name}”.`);
      tbody.querySelector(`tr[data-id="${CSS.escape(r.id)}"] [data-action=toggle]`)?.focus();
    } catch (err) {
      status.say(errorText(err), true);
    }
  }

  async function remove(r) {
    if (!confirm(`Delete the rule “${r.name}”? Its active alarms are cleared.`)) return;
    try {
      await gql(`mutation($id: ID!) { deleteAlarmRule(id: $id) }`, { id: r.id });
      rules = rules.filter((x) => x.id !== r.id);
      render();
      if (editing?.id === r.id) newRule();
      status.say(`Deleted “${r.name}”.`);
    } catch (err) {
      status.say(errorText(err), true);
    }
  }

  // The new rule's form.
  const conditions = h("ol", { class: "conditions", id: "rule-conditions" });
  let seq = 0;
  const removeCondition = (li) => {
    li.remove();
    addButton.disabled = false;
    conditions.querySelector("select")?.focus();
  };
  const addCondition = (c) => {
    conditions.append(conditionRow(++seq, c, removeCondition));
    addButton.disabled = conditions.children.length >= MAX_CONDITIONS;
  };
  const addButton = h("button", { type: "button", id: "add-condition", onclick: () => { addCondition(); conditions.lastChild.querySelector("select").focus(); } }, "Add a condition");
  const name = h("input", { id: "rule-name", name: "name", required: true, maxlength: 100, size: 30, autocomplete: "off" });
  const severity = h("select", { id: "rule-severity", name: "severity" }, SEVERITIES.map((s) => h("option", { value: s, selected: s === "WARNING" }, s.toLowerCase())));
  const forSeconds = h("input", { id: "rule-for", name: "forSeconds", type: "number", min: 0, max: 86400, value: 0, size: 7 });
  const mounts = h("input", { id: "rule-mounts", name: "mountUids", size: 30, autocomplete: "off", placeholder: "every mount" });
  const formStatus = statusBox("rule-form-status");
  const formTitle = h("h2", { id: "rule-form-title" }, "New rule");
  const submit = h("button", { class: "primary", type: "submit", id: "rule-submit" }, "Create rule");
  const cancel = h("button", { type: "button", id: "rule-cancel", hidden: true, onclick: () => {
    const was = editing;
    newRule();
    formStatus.say("");
    if (was) tbody.querySelector(`tr[data-id="${CSS.escape(was.id)}"] [data-action=edit]`)?.focus();
  } }, "Cancel");
  let editing = null;
  const form = h("form", { id: "rule-form", "aria-labelledby": "rule-form-title", onsubmit: async (e) => {
    e.preventDefault();
    for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
    const input = { name: name.value.trim(), severity: severity.value, forSeconds: Number(forSeconds.value || 0),
      mountUids: mounts.value.split(/[\s,]+/).filter(Boolean), conditions: [...conditions.children].map((li) => li.condition()) };
    try {
      if (editing) {
        const was = editing;
        const r = (await gql(`mutation($id: ID!, $in: UpdateAlarmRuleInput!) { updateAlarmRule(id: $id, input: $in) { ${RULE_FIELDS} } }`, { id: was.id, in: input })).updateAlarmRule;
        rules = rules.map((x) => (x.id === r.id ? r : x));
        render();
        newRule();
        formStatus.say(`Saved the rule “${r.name}”.`);
        tbody.querySelector(`tr[data-id="${CSS.escape(r.id)}"] [data-action=edit]`)?.focus();
        return;
      }
      const r = (await gql(`mutation($in: CreateAlarmRuleInput!) { createAlarmRule(input: $in) { ${RULE_FIELDS} } }`, { in: input })).createAlarmRule;
      rules = [...rules, r];
      render();
      newRule();
      formStatus.say(`Created the rule “${r.name}”.`);
    } catch (err) {
      // A field named by the error is marked: name, conditions[1].value, …
      for (const f of err instanceof APIError ? err.fields : []) {
        const m = f.field.match(/^conditions\[(\d+)\]\.?(\w*)/);
        const el = m ? conditions.children[Number(m[1])]?.querySelector(`[name=${m[2] || "code"}]`) : form.querySelector(`[name=${f.field}]`);
        el?.setAttribute("aria-invalid", "true");
      }
      formStatus.say(errorText(err), true);
      form.querySelector("[aria-invalid=true]")?.focus();
    }
  } },
  formTitle,
  h("div", { class: "toolbar" }, field("Name", name), field("Severity", severity), field("Held for (seconds)", forSeconds), field("Mount uids (empty: every mount)", mounts)),
  h("fieldset", {}, h("legend", {}, "Conditions: all must hold"), conditions, addButton),
  h("div", { class: "toolbar" }, submit, cancel), formStatus);
  addCondition();

  // newRule empties the form for a new rule; edit(r) fills it with r's
  // fields to change them (updateAlarmRule).
  function newRule() {
    editing = null;
    form.reset();
    formTitle.textContent = "New rule";
    submit.textContent = "Create rule";
    cancel.hidden = true;
    conditions.replaceChildren();
    seq = 0;
    addCondition();
  }
  function edit(r) {
    editing = r;
    formTitle.textContent = `Edit “${r.name}”`;
    submit.textContent = "Save changes";
    cancel.hidden = false;
    name.value = r.name;
    severity.value = r.severity;
    forSeconds.value = r.forSeconds;
    mounts.value = r.mountUids.join(", ");
    conditions.replaceChildren();
    seq = 0;
    for (const c of r.conditions) addCondition(c);
    formStatus.say("");
    form.scrollIntoView({ block: "start" });
    name.focus({ preventScroll: true });
  }

  main.replaceChildren(h("section", { class: "card", "aria-labelledby": "rules-title" },
    h("div", { class: "title" }, h("h1", { id: "rules-title" }, "Alarm rules"), h("a", { class: "button", href: "#/alarms" }, "Alarms")),
    h("p", { class: "muted" }, "A rule raises an alarm on a mount when all its conditions have held on the mount's latest values for the time given. Disabling or changing a rule clears its active alarms."),
    status,
    h("div", { class: "scroll" }, h("table", { id: "alarm-rules" }, h("thead", {}, h("tr", {},
      ["Name", "Severity", "Conditions", "Held", "Mounts", "State"].map((t) => h("th", { scope: "col" }, t)), h("th", { scope: "col" }, h("span", { class: "sr-only" }, "Actions")))), tbody)),
    suggested),
  h("section", { class: "card" }, form));
  load(true).catch(showError);
  return () => {};
}
