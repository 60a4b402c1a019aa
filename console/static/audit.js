// The audit log (owners): who changed what in the account, when and from
// where, newest first, the older ones a hundred at a time. The filters (actor
// id, action) stand in the URL, #/audit?actor=usr_…&action=mount.abandon.
import { rest } from "./api.js";
import { h, main, fmtDate, showError, field } from "./ui.js";

// The actions an account's log holds (docs/api.md, "Audit log"); the
// installation's (account.create, firmware.*, keys.rotate) are listed by
// `mountd audit` only.
const ACTIONS = ["mount.request-association", "mount.confirm-association", "mount.update", "mount.delete", "mount.abandon",
  "nfc-tags.sync", "nfc-tag.update", "webhook.create", "webhook.update", "webhook.delete", "webhook.rotate-secret",
  "account.rotate-secret", "user.create", "user.set-password", "user.delete", "alarm-rule.create", "alarm-rule.update", "alarm-rule.delete",
  "alarm.acknowledge", "job.create", "job.cancel", "rollout.create", "rollout.pause", "rollout.resume", "rollout.cancel"];
// The newest entries are read first, 100 more at each "Load older", up to
// the 1,000 the API answers at once (GET /api/v1/audit?tail=N).
const PAGE = 100, MAX_TAIL = 1000;

const detailsText = (d) => Object.keys(d || {}).sort().map((k) => `${k}=${JSON.stringify(d[k])}`).join(" ");

export function auditView(query) {
  const tbody = h("tbody");
  const actor = h("input", { type: "search", id: "audit-actor", placeholder: "Actor id", maxlength: 200 });
  const action = h("select", { id: "audit-action" }, h("option", { value: "" }, "Any action"),
    ACTIONS.map((a) => h("option", { value: a }, a)));
  const more = h("button", { id: "audit-more", hidden: true }, "Load older");
  const status = h("p", { class: "muted", id: "audit-status", role: "status" });
  let tail = PAGE;
  let generation = 0; // a reload outdates the answers still arriving

  // load reads the newest `tail` entries the filters select and shows
  // them newest first.
  async function load(reset) {
    const mine = ++generation;
    if (reset) tail = PAGE;
    more.disabled = true;
    try {
      const q = new URLSearchParams({ tail });
      if (actor.value.trim()) q.set("actor", actor.value.trim());
      if (action.value) q.set("action", action.value);
      const d = await rest("/audit?" + q);
      if (mine !== generation) return;
      tbody.replaceChildren(...[...d.entries].reverse().map((e) => h("tr", { "data-action": e.action, "data-id": e.id }, h("td", {}, fmtDate(e.at)),
        h("td", { class: "actor", title: e.actor.id }, `${e.actor.name} (${e.actor.type})`), h("td", {}, e.action), h("td", { class: "target" }, e.target),
        h("td", {}, e.sourceAddress || "—"), h("td", { class: "details" }, detailsText(e.details)))));
      const all = d.entries.length < tail;
      more.hidden = all || tail >= MAX_TAIL;
      status.textContent = !d.entries.length ? "No entries." : all ? `${d.entries.length} entries, newest first.`
        : tail >= MAX_TAIL ? `The newest ${d.entries.length} entries, newest first: \`mountctl audit\` lists them all.`
          : `The newest ${d.entries.length} entries, newest first.`;
    } catch (err) {
      if (mine === generation) showError(err);
    } finally {
      more.disabled = false;
    }
  }
  const read = (q) => {
    actor.value = (q.get("actor") || "").slice(0, 200);
    action.value = ACTIONS.includes(q.get("action")) ? q.get("action") : "";
    load(true);
  };
  // A filter changes the URL; the router hands the new query to update.
  const write = () => {
    const q = new URLSearchParams();
    if (actor.value.trim()) q.set("actor", actor.value.trim());
    if (action.value) q.set("action", action.value);
    const hash = "#/audit" + (q.size ? "?" + q : "");
    if (hash !== location.hash) location.hash = hash;
  };
  action.onchange = write;
  actor.onchange = write;
  more.onclick = () => {
    tail = Math.min(MAX_TAIL, tail + PAGE);
    load(false);
  };
  main.replaceChildren(h("section", { class: "card", "aria-labelledby": "audit-title" }, h("h1", { id: "audit-title" }, "Audit log"),
    h("p", { class: "muted" }, "Every change in the account: who made it, when and from where."),
    h("div", { class: "toolbar", role: "search", "aria-label": "Filter the audit log" }, field("Actor id", actor), field("Action", action)), status,
    h("div", { class: "scroll" }, h("table", { id: "audit" }, h("thead", {}, h("tr", {},
      ["When", "Actor", "Action", "Target", "From", "Details"].map((t) => h("th", { scope: "col" }, t)))), tbody)), more));
  read(query);
  return { update: read, stop: () => { generation++; } };
}
