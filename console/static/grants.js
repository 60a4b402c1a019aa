// A mount's offline access, on its page: what a phone last said the mount
// holds (Mount.offline), and the riders' grants a page at a time, by state,
// with their uses; owners revoke a grant, or every grant of its rider in
// the account (POST /api/v1/grants/revoke: GraphQL revokes one grant only).
import { gql, rest, APIError } from "./api.js";
import { pager } from "./lists.js";
import { h, isOwner, fmtDate, ago, errorText, statusBox, field, canReadAlarms } from "./ui.js";

const GRANT_FIELDS = "id uid riderKey notBefore notAfter epoch label revokedAt uses lastUsedAt";
const PAGE_SIZE = 20;
// The filter's choices: the GrantState, or "" for every grant.
const STATES = [["ACTIVE", "Active"], ["REVOKED", "Revoked"], ["EXPIRED", "Expired"], ["", "All"]];

// Grants are read by those who read the account's alarms: owners and
// maintainers (a rider's token sees its own key's grants only).
export const canReadGrants = canReadAlarms;

// shortKey shows a rider key by its first and last 8 hexadecimal
// characters: enough to tell riders apart by eye (the whole key is its title).
export const shortKey = (k) => (k.length > 20 ? `${k.slice(0, 8)}…${k.slice(-8)}` : k);

// grantState is where a grant stands now: REVOKED once revoked, EXPIRED
// once past notAfter, else ACTIVE (also before notBefore).
function grantState(g, now = Date.now()) {
  if (g.revokedAt) return "REVOKED";
  return Date.parse(g.notAfter) <= now ? "EXPIRED" : "ACTIVE";
}

// refusal says why a revocation failed; a 403 says who may revoke.
function refusal(err) {
  if (err instanceof APIError && err.code === "FORBIDDEN") return `Only the account's owners may revoke grants (the server answered 403 FORBIDDEN: ${err.message}).`;
  return `The grant could not be revoked: ${errorText(err)}`;
}

// offlineStatus shows Mount.offline, or that no phone has told it yet.
// It is read on its own: an error fails this part only.
function offlineStatus(uid) {
  const el = h("div", { id: "mount-offline", "aria-live": "polite" });
  const reload = async () => {
    let o;
    try {
      o = (await gql(`query($uid: ID!) { mount(uid: $uid) { offline { revocationVersion logPending timeTrusted at } } }`, { uid })).mount.offline;
    } catch (err) {
      if (err instanceof APIError && err.code === "UNAUTHENTICATED") return;
      el.replaceChildren(h("p", { class: "muted", "data-offline": "unavailable" }, `What the mount holds could not be read: ${errorText(err)}`));
      return;
    }
    if (!o) {
      el.replaceChildren(h("p", { class: "muted", "data-offline": "none" }, "Not reported yet: no phone has told the server what this mount holds."));
      return;
    }
    const item = (key, label, value) => h("div", { "data-field": key }, h("dt", { class: "label" }, label), h("dd", {}, value));
    el.replaceChildren(h("dl", { class: "grid identity", "data-offline": "reported" },
      item("revocationVersion", "Revocation list", o.revocationVersion ? `version ${o.revocationVersion}` : "none taken yet"),
      item("logPending", "Uses not yet uploaded", String(o.logPending)),
      item("timeTrusted", "Time", o.timeTrusted ? "trusted" : "not trusted since its start"),
      item("at", "Reported", h("span", { title: fmtDate(o.at) }, ago(o.at)))));
  };
  return { el, reload };
}

// grantsCard: the "Offline access" section of mount uid's page. reload()
// reads the status and the page shown again (after GRANT_REVOKED, or a
// use uploaded).
export function grantsCard(uid) {
  if (!canReadGrants()) return { el: "", reload: async () => {} };
  const owner = isOwner();
  const offline = offlineStatus(uid);
  const stateSel = h("select", { id: "grant-state" }, STATES.map(([v, l]) => h("option", { value: v }, l)));
  const tbody = h("tbody");
  const empty = h("p", { class: "empty", id: "grants-empty", hidden: true });
  const status = statusBox("grants-status");
  let currentPage = 1;
  let seq = 0;

  const failed = (err) => {
    if (err instanceof APIError && err.code === "UNAUTHENTICATED") return;
    status.say(`The grants could not be read: ${errorText(err)}`, true);
  };
  const pages = pager("grants-pager", "Pages of the grants", (d) => {
    currentPage += d;
    load().catch(failed);
  });

  // copyKey copies the whole rider key; without a clipboard it shows the
  // key whole and selects it for Ctrl+C.
  async function copyKey(g, code) {
    try {
      await Promise.race([navigator.clipboard.writeText(g.riderKey), new Promise((_, no) => setTimeout(no, 1000))]);
      status.say(`Copied the rider key ${shortKey(g.riderKey)}.`);
    } catch {
      code.textContent = g.riderKey;
      code.classList.add("whole");
      getSelection().selectAllChildren(code);
      status.say("Selected: press Ctrl+C (⌘C) to copy the rider key.");
    }
  }

  async function revoke(g, button) {
    const who = g.label ? `“${g.label}” (rider ${shortKey(g.riderKey)})` : `rider ${shortKey(g.riderKey)}`;
    if (!confirm(`Revoke the grant of ${who} on ${uid}? The mount refuses it once a phone has carried the new revocation list to it.`)) return;
    button.disabled = true;
    try {
      await gql(`mutation($id: ID!) { revokeGrant(id: $id) { id revokedAt } }`, { id: g.id });
      status.say(`Revoked the grant of ${who}.`);
    } catch (err) {
      button.disabled = false;
      status.say(refusal(err), true);
      return;
    }
    await reload();
  }

  async function revokeRider(g, button) {
    if (!confirm(`Revoke every live grant of rider ${shortKey(g.riderKey)} in the account, on every mount, not only ${uid}?`)) return;
    button.disabled = true;
    try {
      const d = await rest("/grants/revoke", { method: "POST", body: { riderKey: g.riderKey } });
      const n = d.grants.length;
      status.say(`Revoked ${n} grant${n === 1 ? "" : "s"} of rider ${shortKey(g.riderKey)}.`);
    } catch (err) {
      button.disabled = false;
      status.say(refusal(err), true);
      return;
    }
    await reload();
  }

  function row(g) {
    const state = grantState(g);
    const short = shortKey(g.riderKey);
    const code = h("code", { class: "rider-key", title: g.riderKey }, short);
    const copy = h("button", { type: "button", class: "small", "data-action": "copy", "aria-label": `Copy the rider key ${short}` }, "Copy");
    copy.onclick = () => copyKey(g, code);
    const cells = [
      h("td", { class: "key" }, code, " ", copy),
      h("td", { class: "wrap" }, g.label ?? h("span", { class: "muted" }, "—")),
      h("td", {}, fmtDate(g.notBefore)),
      h("td", {}, fmtDate(g.notAfter)),
      h("td", { class: "num" }, g.epoch),
      h("td", { class: "num uses" }, g.uses),
      h("td", { title: g.lastUsedAt ? fmtDate(g.lastUsedAt) : null }, g.lastUsedAt ? ago(g.lastUsedAt) : h("span", { class: "muted" }, "never")),
      h("td", { class: "state" }, h("span", { class: "pill grant-state " + state }, state.toLowerCase()),
        g.revokedAt ? h("span", { class: "muted when" }, " " + fmtDate(g.revokedAt)) : ""),
    ];
    if (owner) {
      const actions = h("div", { class: "actions" });
      if (state === "ACTIVE") {
        const one = h("button", { type: "button", class: "danger small", "data-action": "revoke", "aria-label": `Revoke the grant of rider ${short}` }, "Revoke");
        one.onclick = () => revoke(g, one);
        actions.append(one);
      }
      const all = h("button", { type: "button", class: "small", "data-action": "revoke-rider", "aria-label": `Revoke all of this rider: ${short}` }, "Revoke all of this rider");
      all.onclick = () => revokeRider(g, all);
      actions.append(all);
      cells.push(h("td", {}, actions));
    }
    return h("tr", { "data-id": g.id, "data-state": state, "data-rider": g.riderKey }, cells);
  }

  // load reads the page shown; a reply to an older request is dropped.
  async function load() {
    const n = ++seq;
    const d = (await gql(`query($uid: ID!, $state: GrantState, $p: Int!, $n: Int!) {
      grants(uid: $uid, state: $state, currentPage: $p, pageSize: $n) { grants { ${GRANT_FIELDS} } pagination { currentPage totalPages totalItems } } }`,
    { uid, state: stateSel.value || null, p: currentPage, n: PAGE_SIZE })).grants;
    if (n !== seq) return;
    // A page past the last (its grants revoked meanwhile): the last one.
    if (!d.grants.length && currentPage > Math.max(1, d.pagination.totalPages)) {
      currentPage = Math.max(1, d.pagination.totalPages);
      return load();
    }
    tbody.replaceChildren(...d.grants.map(row));
    const word = STATES.find(([v]) => v === stateSel.value)[1].toLowerCase();
    empty.textContent = stateSel.value ? `No ${word} grants.` : "No grants yet: a rider's phone asks for one, or an owner creates one through the API.";
    empty.hidden = d.grants.length > 0;
    pages.show(d.pagination);
    if (status.getAttribute("role") === "alert") status.say("");
  }

  async function reload() {
    await Promise.all([offline.reload(), load().catch(failed)]);
  }

  stateSel.onchange = () => {
    currentPage = 1;
    load().catch(failed);
  };

  const headings = ["Rider key", "Label", "Not before", "Not after", "Epoch", "Uses", "Last used", "State"];
  const el = h("section", { class: "card", id: "mount-grants", "aria-labelledby": "grants-title" },
    h("h2", { id: "grants-title" }, "Offline access"),
    h("p", { class: "muted" }, "A grant lets a rider's phone release the helmet with no network: the mount checks it alone. ",
      "A revocation reaches the mount with the next phone that connects to it; what a phone last said the mount holds:"),
    offline.el,
    h("div", { class: "toolbar", role: "search", "aria-label": "Filter the grants" }, field("State", stateSel)),
    status,
    h("div", { class: "scroll" }, h("table", { id: "grants" }, h("caption", { class: "sr-only" }, "Grants of this mount, newest first"),
      h("thead", {}, h("tr", {}, headings.map((t) => h("th", { scope: "col" }, t)),
        owner ? h("th", { scope: "col" }, h("span", { class: "sr-only" }, "Actions")) : "")), tbody)),
    empty, pages);
  return { el, reload };
}
