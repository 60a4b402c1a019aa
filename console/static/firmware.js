// Firmware: the catalogue, per model, newest first.
import { gql } from "./api.js";
import { h, main, fmtDate, showError } from "./ui.js";

export function firmwareView() {
  const body = h("tbody");
  main.replaceChildren(h("section", { class: "card" }, h("h1", {}, "Firmware"),
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
      h("td", {}, fmtDate(v.availableSince)),
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
