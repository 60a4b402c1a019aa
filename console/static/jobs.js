// Jobs (docs/api.md, "Jobs"): one command for many mounts, created by an
// owner from a filtered fleet. The jobs page lists them with their progress
// per status, live: JOB_COMPLETED arrives over accountEvents, and the
// counts of ACTIVE jobs are read again every so often (a phone's progress
// at each mount is not an account event). A job's page lists its mounts.
import { gql, live } from "./api.js";
import { h, main, isOwner, fmtDate, showError, setConnection, errorText, statusBox, field } from "./ui.js";
import { COMMANDS } from "./mount.js";

export const JOB_FIELDS = "id code params filter description state createdAt expiresAt targets counts { pending issued executed refused unconfirmed }";
const STATUSES = ["pending", "issued", "executed", "refused", "unconfirmed"];
const PAGE_SIZE = 20;
// How often the counts of ACTIVE jobs are read again.
const REFRESH_MS = 10_000;

const jobLink = (j) => "#/jobs/" + encodeURIComponent(j.id);
const jobTitle = (j) => j.description || j.code;
const statePill = (s) => h("span", { class: "pill job-state " + s }, s.toLowerCase());

// progress: a bar per status, each its share of the targets, with the
// count in words beside it (the bars are only a picture of the words).
// statuses are the keys of counts (a rollout's differ from a job's).
export function progress(j, statuses = STATUSES) {
  return h("div", { class: "job-progress", "data-job": j.id }, statuses.map((s) => {
    const n = j.counts[s];
    // Through the style object: the console's CSP refuses style attributes.
    const fill = h("span", { class: "job-fill " + s });
    fill.style.width = (j.targets ? (100 * n) / j.targets : 0) + "%";
    return h("div", { class: "job-status", "data-status": s },
      h("span", { class: "job-status-label" }, s),
      h("span", { class: "job-bar", "aria-hidden": "true" }, fill),
      h("span", { class: "job-count num" }, `${n} of ${j.targets}`));
  }));
}

// pager: previous and next for a paged list; go(page) loads a page.
export function pager(id, label, go) {
  const info = h("span", { class: "muted", "aria-live": "polite" });
  const prev = h("button", { type: "button", "data-action": "prev", onclick: () => go(-1) }, "Previous");
  const next = h("button", { type: "button", "data-action": "next", onclick: () => go(1) }, "Next");
  const el = h("nav", { class: "toolbar pager", id, "aria-label": label }, prev, info, next);
  el.show = (p) => {
    info.textContent = p.totalItems ? `page ${p.currentPage} of ${p.totalPages} · ${p.totalItems} in all` : "";
    prev.disabled = p.currentPage <= 1;
    next.disabled = p.currentPage >= p.totalPages;
  };
  return el;
}

// completions follows JOB_COMPLETED events; onJob gets each event's job.
function completions(onJob, onResync) {
  return live({
    query: `subscription($after: ID) { accountEvents(after: $after, types: [JOB_COMPLETED]) { id type occurredAt job { ${JOB_FIELDS} } } }`,
    onEvent: (ev) => ev.job && onJob(ev.job), onResync, onState: setConnection,
  });
}

// jobsView: the account's jobs, newest first, a page at a time.
export function jobsView() {
  let currentPage = 1;
  const tbody = h("tbody");
  const empty = h("p", { class: "empty", hidden: true }, "No jobs yet. Filter the fleet, then create a job for the mounts it shows.");
  const pages = pager("jobs-pager", "Pages of jobs", (d) => { currentPage += d; load().catch(showError); });
  const rows = new Map();
  const row = (j) => h("tr", { "data-id": j.id, "data-state": j.state },
    h("td", { class: "wrap" }, h("a", { href: jobLink(j) }, jobTitle(j))),
    h("td", {}, j.code), h("td", {}, statePill(j.state)), h("td", { class: "num" }, j.targets),
    h("td", {}, progress(j)), h("td", {}, fmtDate(j.createdAt)), h("td", {}, fmtDate(j.expiresAt)));
  const show = (j) => {
    const tr = rows.get(j.id);
    if (!tr) return;
    const next = row(j);
    tr.replaceWith(next);
    rows.set(j.id, next);
  };
  async function load() {
    const d = (await gql(`query($p: Int!, $n: Int!) { jobs(currentPage: $p, pageSize: $n) { jobs { ${JOB_FIELDS} } pagination { currentPage totalPages totalItems } } }`,
      { p: currentPage, n: PAGE_SIZE })).jobs;
    rows.clear();
    tbody.replaceChildren(...d.jobs.map((j) => {
      const tr = row(j);
      rows.set(j.id, tr);
      return tr;
    }));
    empty.hidden = d.jobs.length > 0;
    pages.show(d.pagination);
  }
  main.replaceChildren(h("section", { class: "card", "aria-labelledby": "jobs-title" },
    h("div", { class: "title" }, h("h1", { id: "jobs-title" }, "Jobs"),
      h("a", { class: "button", href: "#/fleet", id: "jobs-fleet-link" }, "Filter the fleet to create one")),
    h("p", { class: "muted" }, "Each job waits at its mounts for a phone to pass; the bars count its mounts by status."),
    h("div", { class: "scroll" }, h("table", { id: "jobs" }, h("caption", { class: "sr-only" }, "Jobs"),
      h("thead", {}, h("tr", {}, ["Job", "Command", "State", "Mounts", "Progress", "Created", "Expires"].map((t) => h("th", { scope: "col" }, t)))), tbody)),
    empty, pages));
  const started = load();
  started.catch(showError);
  // While a job shown is ACTIVE its counts move: read the page again.
  const timer = setInterval(() => {
    if ([...rows.values()].some((tr) => tr.dataset.state === "ACTIVE")) load().catch(() => {});
  }, REFRESH_MS);
  const sub = completions(show, load);
  return () => {
    clearInterval(timer);
    sub.stop();
  };
}

// jobView: one job, its progress, its mounts a page at a time, and Cancel
// for owners while it is ACTIVE.
export function jobView(id) {
  let job = null;
  let currentPage = 1;
  const head = h("div", { id: "job-head" }, h("p", { class: "muted" }, "Loading…"));
  const status = statusBox("job-status");
  const tbody = h("tbody");
  const pages = pager("job-mounts-pager", "Pages of the job's mounts", (d) => { currentPage += d; loadMounts().catch(showError); });
  const cancel = h("button", { type: "button", class: "danger", id: "job-cancel", hidden: true, onclick: async () => {
    if (!confirm(`Cancel the job “${jobTitle(job)}”? Its mounts that have not run it yet will not be offered it any more.`)) return;
    cancel.disabled = true;
    try {
      showJob((await gql(`mutation($id: ID!) { cancelJob(id: $id) { ${JOB_FIELDS} } }`, { id })).cancelJob);
      status.say("The job is cancelled.");
      await loadMounts();
    } catch (err) {
      status.say(errorText(err), true);
    } finally {
      cancel.disabled = false;
    }
  } }, "Cancel job");
  const title = h("h1", { id: "job-title" }, "Job");
  function showJob(j) {
    job = j;
    title.textContent = jobTitle(j);
    const params = Object.entries(j.params || {}).map(([k, v]) => `${k}=${v}`).join(", ");
    head.replaceChildren(h("dl", { class: "command-parts", id: "job-details", "data-state": j.state },
      h("dt", {}, "State"), h("dd", {}, statePill(j.state)),
      h("dt", {}, "Command"), h("dd", {}, j.code + (params ? ` (${params})` : "")),
      h("dt", {}, "Filter"), h("dd", {}, j.filter ? h("code", {}, j.filter) : "every mount"),
      h("dt", {}, "Mounts"), h("dd", {}, j.targets),
      h("dt", {}, "Created"), h("dd", {}, fmtDate(j.createdAt)),
      h("dt", {}, "Expires"), h("dd", {}, fmtDate(j.expiresAt))), progress(j));
    cancel.hidden = !isOwner() || j.state !== "ACTIVE";
  }
  async function loadJob() {
    showJob((await gql(`query($id: ID!) { job(id: $id) { ${JOB_FIELDS} } }`, { id })).job);
  }
  async function loadMounts() {
    const d = (await gql(`query($id: ID!, $p: Int!, $n: Int!) { jobMounts(id: $id, currentPage: $p, pageSize: $n) { mounts { uid status commandId } pagination { currentPage totalPages totalItems } } }`,
      { id, p: currentPage, n: PAGE_SIZE })).jobMounts;
    tbody.replaceChildren(...d.mounts.map((m) => h("tr", { "data-uid": m.uid, "data-status": m.status },
      h("td", {}, h("a", { href: "#/mounts/" + encodeURIComponent(m.uid) }, m.uid)),
      h("td", {}, h("span", { class: "status " + m.status }, m.status.toLowerCase())),
      h("td", {}, m.commandId ? h("code", {}, m.commandId) : "—"))));
    pages.show(d.pagination);
  }
  main.replaceChildren(h("p", {}, h("a", { href: "#/jobs" }, "← Jobs")),
    h("section", { class: "card", id: "job", "aria-labelledby": "job-title" }, h("div", { class: "title" }, title, cancel), head, status),
    h("section", { class: "card", "aria-labelledby": "job-mounts-title" }, h("h2", { id: "job-mounts-title" }, "Mounts"),
      h("div", { class: "scroll" }, h("table", { id: "job-mounts" }, h("thead", {}, h("tr", {}, ["Mount", "Status", "Command"].map((t) => h("th", { scope: "col" }, t)))), tbody)), pages));
  const reload = () => Promise.all([loadJob(), loadMounts()]);
  reload().catch(showError);
  const timer = setInterval(() => { if (job?.state === "ACTIVE") reload().catch(() => {}); }, REFRESH_MS);
  const sub = completions((j) => { if (j.id === id) reload().catch(showError); }, reload);
  return () => {
    clearInterval(timer);
    sub.stop();
  };
}

// jobForm: an owner's form for a job over the fleet filter expr(); targets()
// counts the mounts it would reach now, for the confirmation.
export function jobForm(expr, targets) {
  const codeSel = h("select", { id: "job-code", name: "code", onchange: () => showParams() }, Object.keys(COMMANDS).map((c) => h("option", { value: c }, c)));
  const params = h("div", { class: "params" });
  const description = h("input", { id: "job-description", name: "description", maxlength: 500, autocomplete: "off" });
  const expires = h("input", { id: "job-expires", name: "expiresAt", type: "datetime-local" });
  const status = statusBox("job-form-status");
  function showParams() {
    params.replaceChildren(...COMMANDS[codeSel.value].map(([name, label, vals]) => field(label, vals
      ? h("select", { id: "job-param-" + name, name }, vals.map((v) => h("option", { value: v }, v)))
      : h("input", { id: "job-param-" + name, name, required: true, autocomplete: "off", spellcheck: "false" }))));
  }
  showParams();
  // The default expiry, as the server's: seven days from now, local time.
  const local = (d) => new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
  expires.value = local(new Date(Date.now() + 7 * 86400_000));
  const form = h("form", { id: "job-form", class: "card", "aria-labelledby": "job-form-title", hidden: true, onsubmit: async (e) => {
    e.preventDefault();
    const values = {};
    for (const c of params.querySelectorAll("input, select")) values[c.name] = c.value.trim();
    const n = targets();
    const f = expr();
    if (!confirm(`Create a ${codeSel.value} job for ${n} mount${n === 1 ? "" : "s"}? They are the associated mounts the filter “${f}” selects now; each runs the command when a phone next passes it.`)) return;
    try {
      const j = (await gql(`mutation($in: CreateJobInput!) { createJob(input: $in) { ${JOB_FIELDS} } }`, { in: {
        code: codeSel.value, params: values, filter: f, description: description.value.trim() || undefined,
        expiresAt: expires.value ? new Date(expires.value).toISOString() : undefined } })).createJob;
      status.replaceChildren(`Job created for ${j.targets} mount${j.targets === 1 ? "" : "s"}: `, h("a", { href: jobLink(j), id: "job-created" }, jobTitle(j)), ".");
      status.className = "form-status";
      status.setAttribute("role", "status");
    } catch (err) {
      status.say(errorText(err), true);
    }
  } }, h("h2", { id: "job-form-title" }, "Create a job for these mounts"),
  h("p", { class: "muted" }, "The job's mounts are the associated ones the filter expression selects when it is created; the other filters of this page do not narrow it."),
  h("div", { class: "toolbar" }, field("Command", codeSel), params, field("Description", description), field("Expires", expires),
    h("button", { class: "primary", type: "submit" }, "Create job…")), status);
  return form;
}
