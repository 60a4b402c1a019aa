// Shared by the console's views: building elements, the one date format,
// the signed-in person and the connection badge.
import { APIError } from "./api.js";

export const main = document.getElementById("main");
// session.me is the signed-in person ({accountId, name, role, mountUids});
// session.sub is the person's user id (the token's sub).
export const session = { me: null, sub: null };
export const isOwner = () => session.me?.role === "owner";

// h builds an element: h("a", {href: "#/"}, "text", child...).
export function h(tag, attrs = {}, ...children) {
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

export const fmtBattery = (v) => (v === null || v === undefined ? "—" : `${v}%`);
export const fmtTemp = (v) => (v === null || v === undefined ? "—" : `${v.toFixed(1)} °C`);
export const fmtBool = (v, yes, no) => (v === null || v === undefined ? "—" : v ? yes : no);

// fmtDate: the one date format of the console, local time, 2026-05-04 13:07:09.
export function fmtDate(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function ago(iso) {
  if (!iso) return "never";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

export function showError(err) {
  if (err instanceof APIError && err.code === "UNAUTHENTICATED") return;
  main.prepend(h("p", { class: "card error", role: "alert" }, err.message || String(err)));
}

export function setConnection(state) {
  const el = document.getElementById("connection");
  el.hidden = false;
  el.className = "connection " + state;
  el.dataset.state = state;
  el.textContent = { connecting: "connecting…", live: "live", down: "reconnecting…" }[state];
}

export const EVENT_TYPES = ["STATES_REPORTED", "ASSOCIATION_REQUESTED", "ASSOCIATION_CONFIRMED", "ASSOCIATION_EXPIRED", "ABANDONED", "DELETED", "NFC_TAGS_SYNCED", "COMMAND_ISSUED", "COMMAND_EXECUTED", "COMMAND_REFUSED", "COMMAND_UNCONFIRMED",
  "MOUNT_OFFLINE", "MOUNT_ONLINE", "ALARM_RAISED", "ALARM_CLEARED", "ALARM_ACKNOWLEDGED"];

// Presence: whether the mount is heard from (docs/api.md, "Presence and alarms").
export const PRESENCES = ["ONLINE", "OFFLINE", "UNKNOWN"];
export const presencePill = (p) => h("span", { class: "pill presence " + (p || "UNKNOWN") }, (p || "UNKNOWN").toLowerCase());

// canReadAlarms: owners and maintainers (restricted without mounts) read
// the account's alarms; a restricted user with mounts does not.
export const canReadAlarms = () => isOwner() || (session.me?.role === "restricted" && !(session.me.mountUids || []).length);

// The events that move a command's status (a receipt, or its expiry).
export const COMMAND_STATUS_EVENTS = ["COMMAND_EXECUTED", "COMMAND_REFUSED", "COMMAND_UNCONFIRMED"];

// The state codes behind the latest values, by the Mount field that shows them.
export const VALUE_CODES = { batteryLevel: "BATTERY_LEVEL", cpuTemperature: "CPU_TEMPERATURE", mountLocked: "MOUNT_LOCKED", helmetMounted: "HELMET_MOUNTED" };

// markUnverified marks el as showing a value the mount did not sign: the
// stylesheet adds the word "unverified" after it (generated, so that the
// element's text stays the value), and the title says why.
export function markUnverified(el, on) {
  el.classList.toggle("unverified", on);
  if (on) el.title = "Unverified: not signed by the mount, a phone reported it";
  else el.removeAttribute("title");
  return el;
}

export const MOUNT_FIELDS = "uid name modelNumber serialNumber firmwareRevision softwareRevision associationState mountLocked helmetMounted batteryLevel cpuTemperature lastReportAt associationDeadline unverifiedStates lastSeenAt presence";

// isUnverified: the mount's latest value of field (a VALUE_CODES key) came
// in a report the mount did not sign.
export const isUnverified = (m, field) => m[field] !== null && m[field] !== undefined && (m.unverifiedStates || []).includes(VALUE_CODES[field]);

// withEvent: the mount as an event leaves it (m: as shown so far). An
// event's mount without lastSeenAt keeps the lastSeenAt shown, and an
// UNKNOWN presence with it says nothing either (MOUNT_OFFLINE and
// MOUNT_ONLINE say theirs), unless the event ends or starts an association,
// which resets presence.
const PRESENCE_RESETS = ["ASSOCIATION_REQUESTED", "ASSOCIATION_CONFIRMED", "ASSOCIATION_EXPIRED", "ABANDONED", "DELETED"];
export function withEvent(m, ev) {
  const next = { ...(m || {}), ...ev.mount, lastReportAt: lastReportOf(ev) };
  if (m?.lastSeenAt && !ev.mount.lastSeenAt && !PRESENCE_RESETS.includes(ev.type)) {
    next.lastSeenAt = m.lastSeenAt;
    if (ev.mount.presence === "UNKNOWN") next.presence = m.presence;
  }
  return next;
}

// lastReportOf: the event's newest state time, or the mount's own.
export function lastReportOf(ev) {
  let t = ev.mount.lastReportAt;
  for (const s of ev.states || []) if (!t || s.occurredAt > t) t = s.occurredAt;
  return t;
}

// errorText: an error as a person reads it; a validation error names its
// fields ("name must be at most 100 characters").
export function errorText(err) {
  if (err instanceof APIError && err.fields.length) return err.fields.map((f) => `${f.field} ${f.message}`).join("; ");
  return err?.message || String(err);
}

// statusBox: a live region for a form's outcome; say(text) or
// say(text, true) for an error (role=alert, read out at once).
export function statusBox(id) {
  const el = h("p", { id, class: "form-status", "aria-live": "polite" });
  el.say = (text, bad = false) => {
    el.className = "form-status" + (bad ? " error" : "");
    el.setAttribute("role", bad ? "alert" : "status");
    el.textContent = text;
  };
  return el;
}

// field: a labelled input or select, the label above it.
export function field(label, control) {
  const id = control.id || (control.id = "f-" + Math.random().toString(36).slice(2, 10));
  return h("div", { class: "field" }, h("label", { for: id }, label), control);
}

// fetchPages reads pages of 100 (page(p) answers {items, totalPages}),
// six requests in flight, at most maxPages: a large fleet costs a bounded
// number of requests. It answers the items and whether they are all.
export async function fetchPages(page, maxPages) {
  const first = await page(1);
  const last = Math.min(first.totalPages, maxPages);
  const pages = [first];
  let next = 2;
  const worker = async () => {
    while (next <= last) {
      const p = next++;
      pages[p - 1] = await page(p);
    }
  };
  await Promise.all(Array.from({ length: 6 }, worker));
  return { items: pages.flatMap((p) => p.items), complete: first.totalPages <= maxPages, totalItems: first.totalItems };
}
