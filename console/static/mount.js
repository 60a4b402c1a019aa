// A mount's page: its values live, the history charts, the command audit
// and its NFC tags.
import { gql, live } from "./api.js";
import { exportMenu } from "./exports.js";
import { h, main, isOwner, fmtDate, ago, fmtBattery, fmtTemp, fmtBool, showError, setConnection, lastReportOf, MOUNT_FIELDS } from "./ui.js";

export function mountView(uid) {
  const values = h("div", { class: "grid" });
  const charts = h("div", { class: "charts" });
  const commands = h("tbody");
  const tags = h("ul");
  const actions = h("div", { class: "toolbar" });
  const periodSel = h("select", { id: "period", "aria-label": "Period", onchange: () => loadHistory() },
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
          location.hash = "#/fleet";
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
        // The console's date format here too: the legend's time in full, the axis as HH:MM over MM-DD.
        series: [{ value: (u, v) => (v === null ? "—" : fmtDate(new Date(v * 1000).toISOString())) }, { label: title, stroke: "#2f6fde", width: 2, points: { show: data[0].length < 60 }, value: (u, v) => (v === null ? "—" : v + " " + unit) }],
        axes: [{ space: 60, values: (u, vals) => vals.map((v) => { const d = fmtDate(new Date(v * 1000).toISOString()); return d.slice(11, 16) + "\n" + d.slice(5, 10); }) }, { values: (u, vals) => vals.map((v) => v + unit) }] }, data, box));
    });
  }

  async function load() {
    const d = await gql(`query($uid: ID!) { mount(uid: $uid) { ${MOUNT_FIELDS} nfcTags { uid name } } }`, { uid });
    showValues(d.mount);
    tags.replaceChildren(...(d.mount.nfcTags.length ? d.mount.nfcTags.map((t) => h("li", {}, `${t.name || t.uid} (${t.uid})`)) : [h("li", { class: "muted" }, "none")]));
    if (isOwner()) {
      const c = await gql(`query($uid: ID!) { mountCommands(uid: $uid, pageSize: 50) { commands { code generatedAt issuedBy } } }`, { uid });
      commands.replaceChildren(...c.mountCommands.commands.map((x) => h("tr", {}, h("td", {}, x.code), h("td", {}, fmtDate(x.generatedAt)), h("td", {}, x.issuedBy || ""))));
    }
    await loadHistory();
  }

  main.replaceChildren(
    h("p", {}, h("a", { href: "#/fleet" }, "← Fleet")),
    h("section", { class: "card" }, h("h1", { id: "mount-uid" }, uid), values, actions),
    h("section", { class: "card" }, h("div", { class: "toolbar" }, h("h2", {}, "History"), periodSel,
      // The whole history, not only the period shown (owners).
      isOwner() ? exportMenu("export-history", "Export", (f) => `/exports/states?mountUid=${encodeURIComponent(uid)}&format=${f}`, showError) : ""), charts),
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
