// Firmware: how many mounts run each revision per model, and the catalogue,
// per model, newest first; owners start a rollout of a version from its
// row (rollouts.js).
import { gql } from "./api.js";
import { h, main, fmtDate, showError, fetchPages, isOwner } from "./ui.js";
import { rolloutForm } from "./rollouts.js";

// The fleet is counted from at most this many pages of 100 mounts: a
// bounded number of requests however large the fleet.
const FLEET_PAGES = 100;

export function firmwareView() {
  const body = h("tbody");
  const fleetBody = h("tbody");
  const fleetNote = h("p", { class: "muted", id: "firmware-fleet-note", "aria-live": "polite" }, "Counting…");
  const owner = isOwner();
  const startForm = owner ? rolloutForm() : "";
  const columns = ["Model", "Revision", "Available since", "Status", "Size", ...(owner ? ["Rollout"] : [])];
  main.replaceChildren(
    h("section", { class: "card", "aria-labelledby": "fleet-firmware-title" }, h("h1", { id: "fleet-firmware-title" }, "Firmware in the fleet"),
      h("p", { class: "muted" }, "How many mounts run each revision, per model. The revision is the mount's software revision, the one the catalogue's versions are numbered by and update checks compare; mounts no longer associated (INACTIVE) are not counted."),
      fleetNote,
      h("div", { class: "scroll" }, h("table", { id: "firmware-fleet" }, h("thead", {}, h("tr", {}, ["Model", "Revision", "Mounts", "Share", "Catalogue"].map((t, i) => h("th", { scope: "col", class: i === 2 ? "num" : undefined }, i === 3 ? h("span", { class: "sr-only" }, t) : t)))), fleetBody))),
    h("section", { class: "card", "aria-labelledby": "catalogue-title" }, h("h2", { id: "catalogue-title" }, "Catalogue"),
      h("p", { class: "muted" }, "Each model's versions, newest first; the latest available one is marked."),
      h("div", { class: "scroll" }, h("table", { id: "firmware" }, h("thead", {}, h("tr", {}, columns.map((t) => h("th", { scope: "col" }, t)))), body))),
    startForm);
  (async () => {
    const [catalogue, fleet] = await Promise.all([
      fetchPages(async (p) => {
        const d = (await gql(`query($p: Int!) { firmwareVersions(currentPage: $p, pageSize: 100) { versions { modelNumber softwareRevision availableSince deprecated mandatory size } pagination { totalPages } } }`, { p })).firmwareVersions;
        return { items: d.versions, totalPages: d.pagination.totalPages };
      }, 20),
      fetchPages(async (p) => {
        const d = (await gql(`query($p: Int!) { mounts(currentPage: $p, pageSize: 100) { mounts { modelNumber softwareRevision associationState } pagination { totalPages totalItems } } }`, { p })).mounts;
        return { items: d.mounts, totalPages: d.pagination.totalPages, totalItems: d.pagination.totalItems };
      }, FLEET_PAGES),
    ]);
    const all = catalogue.items;
    const latest = new Map();
    const now = Date.now();
    for (const v of all) {
      if (v.deprecated || Date.parse(v.availableSince) > now) continue;
      const cur = latest.get(v.modelNumber);
      if (!cur || cmpSemver(v.softwareRevision, cur.softwareRevision) > 0) latest.set(v.modelNumber, v);
    }
    showFleet(fleet, all, latest);
    all.sort((a, b) => (a.modelNumber === b.modelNumber ? cmpSemver(b.softwareRevision, a.softwareRevision) : a.modelNumber < b.modelNumber ? -1 : 1));
    // A rollout takes a version that is available and not deprecated.
    const startable = (v) => !v.deprecated && Date.parse(v.availableSince) <= now;
    body.replaceChildren(...all.map((v) => h("tr", { "data-model": v.modelNumber, "data-revision": v.softwareRevision },
      h("td", {}, v.modelNumber), h("td", {}, v.softwareRevision),
      h("td", {}, fmtDate(v.availableSince)),
      h("td", {}, latest.get(v.modelNumber) === v ? h("span", { class: "pill ASSOCIATED" }, "latest") : "", v.deprecated ? " deprecated" : "", v.mandatory ? " mandatory" : ""),
      h("td", { class: "num" }, `${(v.size / 1048576).toFixed(1)} MiB`),
      owner ? h("td", {}, startable(v) ? h("button", { type: "button", class: "start-rollout", "aria-controls": "rollout-form", onclick: () => startForm.open(v, ahead(fleet.items, v)) },
        "Start rollout…", h("span", { class: "sr-only" }, ` of ${v.softwareRevision} for ${v.modelNumber}`)) : "") : "")));
    if (!all.length) body.append(h("tr", {}, h("td", { colspan: columns.length, class: "empty" }, "No firmware published.")));
  })().catch(showError);

  // showFleet counts mounts by model and revision: models by name, the
  // newest revision first, each row with how it stands in the catalogue.
  function showFleet(fleet, versions, latest) {
    const counts = new Map();
    let counted = 0;
    for (const m of fleet.items) {
      if (m.associationState === "INACTIVE") continue;
      counted++;
      const key = JSON.stringify([m.modelNumber, m.softwareRevision]);
      counts.set(key, (counts.get(key) || 0) + 1);
    }
    const rows = [...counts].map(([k, n]) => [...JSON.parse(k), n]);
    rows.sort((a, b) => (a[0] === b[0] ? cmpSemver(b[1], a[1]) : a[0] < b[0] ? -1 : 1));
    const known = new Set(versions.map((v) => JSON.stringify([v.modelNumber, v.softwareRevision])));
    const standing = (model, rev) => {
      const top = latest.get(model);
      if (!rev) return "";
      if (top && top.softwareRevision === rev) return h("span", { class: "pill ASSOCIATED" }, "latest");
      if (top && cmpSemver(rev, top.softwareRevision) < 0) return h("span", { class: "pill IDLE" }, "update available");
      return known.has(JSON.stringify([model, rev])) ? "" : h("span", { class: "muted" }, "not in the catalogue");
    };
    const most = Math.max(1, ...rows.map((r) => r[2]));
    // Through the style object: the console's CSP refuses style attributes.
    const bar = (pct) => {
      const el = h("span", { class: "share" });
      el.style.width = pct + "%";
      return el;
    };
    fleetBody.replaceChildren(...rows.map(([model, rev, n]) => h("tr", { "data-model": model, "data-revision": rev },
      h("td", {}, model || h("span", { class: "muted" }, "no model")), h("td", {}, rev || h("span", { class: "muted" }, "not reported")),
      h("td", { class: "num count" }, n),
      h("td", { class: "bar-cell", "aria-hidden": "true" }, bar((100 * n) / most)),
      h("td", {}, standing(model, rev)))));
    if (!rows.length) fleetBody.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, "No mounts.")));
    fleetNote.textContent = fleet.complete
      ? `${counted} mount${counted === 1 ? "" : "s"} counted.`
      : `The first ${fleet.items.length} of ${fleet.totalItems} mounts read (${FLEET_PAGES} pages of 100), ${counted} of them counted: the counts are a sample of a fleet this large.`;
  }
  return () => {};
}

// ahead: how many of the fleet's associated mounts of v's model (as read)
// run a revision newer than v's, and the highest of them.
function ahead(mounts, v) {
  let count = 0, highest = null;
  for (const m of mounts) {
    if (m.associationState === "INACTIVE" || m.modelNumber !== v.modelNumber || !m.softwareRevision || cmpSemver(m.softwareRevision, v.softwareRevision) <= 0) continue;
    count++;
    if (!highest || cmpSemver(m.softwareRevision, highest) > 0) highest = m.softwareRevision;
  }
  return { count, highest };
}

function cmpSemver(a, b) {
  const pa = a.split(/[.+-]/).map(Number), pb = b.split(/[.+-]/).map(Number);
  for (let i = 0; i < 3; i++) if ((pa[i] || 0) !== (pb[i] || 0)) return (pa[i] || 0) - (pb[i] || 0);
  return 0;
}
