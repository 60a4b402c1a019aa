// The audit log (owners): who changed what in the account, when and from
// where, oldest first as the log is, a page at a time. The filters (actor
// id, action) stand in the URL, #/audit?actor=usr_…&action=mount.abandon.
import { gql } from "./api.js";
import { h, main, fmtDate, showError } from "./ui.js";

// The actions an account's log holds (docs/api.md, "Audit log"); the
// installation's (account.create, firmware.*, keys.rotate) are listed by
// `mountd audit` only.
const ACTIONS = ["mount.request-association", "mount.confirm-association", "mount.update", "mount.delete", "mount.abandon",
  "nfc-tags.sync", "nfc-tag.update", "webhook.create", "webhook.update", "webhook.delete", "webhook.rotate-secret",
  "account.rotate-secret", "user.create", "user.set-password", "user.delete", "alarm-rule.create", "alarm-rule.update", "alarm-rule.delete",
  "alarm.acknowledge", "job.create", "job.cancel", "rollout.create", "rollout.pause", "rollout.resume", "rollout.cancel"];
const PAGE = 100;

const detailsText = (d) => Object.keys(d || {}).sort().map((k) => `${k}=${JSON.stringify(d[k])}`).join(" ");

export function auditView(query) {
  const tbody = h("tbody");
  const actor = h("input", { type: "search", id: "audit-actor", placeholder: "Actor id", "aria-label": "Actor id", maxlength: 200 });
  const action = h("select", { id: "audit-action", "aria-label": "Action" }, h("option", { value: "" }, "Any action"),
    ACTIONS.map((a) => h("option", { value: a }, a)));
  const more = h("button", { id: "audit-more", hidden: true }, "Load more");
  const status = h("p", { class: "muted", id: "audit-status", role: "status" });
  let next = null;
  let generation = 0; // a reload outdates the pages still arriving

  async function load(reset) {
    const mine = reset ? ++generation : generation;
    if (reset) {
      tbody.replaceChildren();
      next = null;
    }
    more.disabled = true;
    try {
      const vars = { after: next, actor: actor.value.trim() || null, action: action.value || null };
      const d = await gql(`query($after: ID, $actor: String, $action: String) { audit(after: $after, limit: 100, actor: $actor, action: $action) { entries { id at actor { type id name } action target sourceAddress details } next } }`, vars);
      if (mine !== generation) return;
      for (const e of d.audit.entries) {
        tbody.append(h("tr", { "data-action": e.action }, h("td", {}, fmtDate(e.at)),
          h("td", { title: e.actor.id }, `${e.actor.name} (${e.actor.type})`), h("td", {}, e.action), h("td", {}, e.target),
          h("td", {}, e.sourceAddress || "—"), h("td", { class: "details" }, detailsText(e.details))));
      }
      next = d.audit.next;
      more.hidden = d.audit.entries.length < PAGE;
      status.textContent = tbody.children.length ? `${tbody.children.length} entries, oldest first` : "No entries.";
    } catch (err) {
      showError(err);
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
  more.onclick = () => load(false);
  main.replaceChildren(h("section", { class: "card", "aria-labelledby": "audit-title" }, h("h1", { id: "audit-title" }, "Audit log"),
    h("p", { class: "muted" }, "Every change in the account: who made it, when and from where."),
    h("div", { class: "toolbar", role: "search" }, actor, action), status,
    h("div", { class: "scroll" }, h("table", { id: "audit" }, h("thead", {}, h("tr", {},
      ["When", "Actor", "Action", "Target", "From", "Details"].map((t) => h("th", { scope: "col" }, t)))), tbody)), more));
  read(query);
  return { update: read, stop: () => { generation++; } };
}
