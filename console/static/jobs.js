// Jobs (docs/api.md, "Jobs"): one command for many mounts, created by an
// owner from a filtered fleet. The jobs page lists them with their progress
// per status, live: JOB_COMPLETED arrives over accountEvents, and the
// counts of ACTIVE jobs are read again every so often (a phone's progress
// at each mount is not an account event). A job's page lists its mounts.
import { gql } from "./api.js";
import { progress, pager, listPage, pagedQuery, follow, refreshEvery } from "./lists.js";
import { h, main, isOwner, fmtDate, errorText, statusBox, field } from "./ui.js";
import { COMMANDS } from "./mount.js";

export const JOB_FIELDS = "id code params filter description state createdAt expiresAt targets counts { pending issued executed refused unconfirmed }";
const STATUSES = ["pending", "issued", "executed", "refused", "unconfirmed"];
const PAGE_SIZE = 20;
// How often the counts of ACTIVE jobs are read again.
const REFRESH_MS = 10_000;

const jobLink = (j) => "#/jobs/" + encodeURIComponent(j.id);
const jobTitle = (j) => j.description || j.code;
const statePill = (s) => h("span", { class: "pill job-state " + s }, s.toLowerCase());

// The account events a job's pages follow.
const JOB_EVENTS = `subscription($after: ID) { accountEvents(after: $after, types: [JOB_COMPLETED]) { id type occurredAt job { ${JOB_FIELDS} } } }`;

// jobsView: the account's jobs, newest first, a page at a time.
export function jobsView() {
  const row = (j) => h("tr", { "data-id": j.id, "data-state": j.state },
    h("td", { class: "wrap" }, h("a", { href: jobLink(j) }, jobTitle(j))),
    h("td", {}, j.code), h("td", {}, statePill(j.state)), h("td", { class: "num" }, j.targets),
    h("td", {}, progress(j, STATUSES)), h("td", {}, fmtDate(j.createdAt)), h("td", {}, fmtDate(j.expiresAt)));
  // While a job shown is ACTIVE its counts move: the page is read again.
  // A completed job's row is shown as its event says.
  const list = listPage({
    name: "jobs", label: "jobs", pageSize: PAGE_SIZE, row, refreshMs: REFRESH_MS,
    fetch: pagedQuery(`query($p: Int!, $n: Int!) { jobs(currentPage: $p, pageSize: $n) { jobs { ${JOB_FIELDS} } pagination { currentPage totalPages totalItems } } }`, "jobs", "jobs"),
    emptyText: "No jobs yet. Filter the fleet, then create a job for the mounts it shows.",
    active: (tr) => tr.dataset.state === "ACTIVE",
    events: JOB_EVENTS, onEvent: (ev, l) => ev.job && l.replace(ev.job),
  });
  main.replaceChildren(h("section", { class: "card", "aria-labelledby": "jobs-title" },
    h("div", { class: "title" }, h("h1", { id: "jobs-title" }, "Jobs"),
      h("a", { class: "button", href: "#/fleet", id: "jobs-fleet-link" }, "Filter the fleet to create one")),
    h("p", { class: "muted" }, "Each job waits at its mounts for a phone to pass; the bars count its mounts by status."),
    list.status,
    h("div", { class: "scroll" }, h("table", { id: "jobs" }, h("caption", { class: "sr-only" }, "Jobs"),
      h("thead", {}, h("tr", {}, ["Job", "Command", "State", "Mounts", "Progress", "Created", "Expires"].map((t) => h("th", { scope: "col" }, t)))), list.tbody)),
    list.empty, list.pages));
  return list.stop;
}

// jobView: one job, its progress, its mounts a page at a time, and Cancel
// for owners while it is ACTIVE.
export function jobView(id) {
  let job = null;
  let currentPage = 1;
  let jobSeq = 0, mountsSeq = 0;
  const head = h("div", { id: "job-head" }, h("p", { class: "muted" }, "Loading…"));
  const status = statusBox("job-status");
  const reloadStatus = statusBox("job-reload-status");
  const tbody = h("tbody");
  const pages = pager("job-mounts-pager", "Pages of the job's mounts", (d) => { currentPage += d; loadMounts().catch(failed); });
  const cancel = h("button", { type: "button", class: "danger", id: "job-cancel", hidden: true, onclick: async () => {
    if (!confirm(`Cancel the job “${jobTitle(job)}”? Its mounts that have not run it yet will not be offered it any more.`)) return;
    cancel.disabled = true;
    jobSeq++;
    try {
      showJob((await gql(`mutation($id: ID!) { cancelJob(id: $id) { ${JOB_FIELDS} } }`, { id })).cancelJob);
      status.say("The job is cancelled.");
    } catch (err) {
      status.say(errorText(err), true);
      cancel.disabled = false;
      return;
    }
    cancel.disabled = false;
    try {
      await loadMounts();
    } catch (err) {
      status.say(`The job is cancelled. Its mounts could not be read again: ${errorText(err)}`, true);
    }
  } }, "Cancel job");
  const title = h("h1", { id: "job-title" }, "Job");
  function showJob(j) {
    job = j;
    mountsPart.hidden = false;
    title.textContent = jobTitle(j);
    const params = Object.entries(j.params || {}).map(([k, v]) => `${k}=${v}`).join(", ");
    head.replaceChildren(h("dl", { class: "command-parts", id: "job-details", "data-state": j.state },
      h("dt", {}, "State"), h("dd", {}, statePill(j.state)),
      h("dt", {}, "Command"), h("dd", {}, j.code + (params ? ` (${params})` : "")),
      h("dt", {}, "Filter"), h("dd", {}, j.filter ? h("code", {}, j.filter) : "every mount"),
      h("dt", {}, "Mounts"), h("dd", {}, j.targets),
      h("dt", {}, "Created"), h("dd", {}, fmtDate(j.createdAt)),
      h("dt", {}, "Expires"), h("dd", {}, fmtDate(j.expiresAt))), progress(j, STATUSES));
    cancel.hidden = !isOwner() || j.state !== "ACTIVE";
  }
  // A reply to an older request is dropped.
  async function loadJob() {
    const n = ++jobSeq;
    const j = (await gql(`query($id: ID!) { job(id: $id) { ${JOB_FIELDS} } }`, { id })).job;
    if (n === jobSeq) showJob(j);
  }
  async function loadMounts() {
    const n = ++mountsSeq;
    const d = (await gql(`query($id: ID!, $p: Int!, $n: Int!) { jobMounts(id: $id, currentPage: $p, pageSize: $n) { mounts { uid status commandId } pagination { currentPage totalPages totalItems } } }`,
      { id, p: currentPage, n: PAGE_SIZE })).jobMounts;
    if (n !== mountsSeq) return;
    tbody.replaceChildren(...d.mounts.map((m) => h("tr", { "data-uid": m.uid, "data-status": m.status },
      h("td", {}, h("a", { href: "#/mounts/" + encodeURIComponent(m.uid) }, m.uid)),
      h("td", {}, h("span", { class: "status " + m.status }, m.status.toLowerCase())),
      h("td", {}, m.commandId ? h("code", {}, m.commandId) : "—"))));
    pages.show(d.pagination);
  }
  const mountsPart = h("section", { class: "card", id: "job-mounts-part", "aria-labelledby": "job-mounts-title" }, h("h2", { id: "job-mounts-title" }, "Mounts"),
      h("div", { class: "scroll" }, h("table", { id: "job-mounts" }, h("caption", { class: "sr-only" }, "The job's mounts"),
        h("thead", {}, h("tr", {}, ["Mount", "Status", "Command"].map((t) => h("th", { scope: "col" }, t)))), tbody)), pages);
  main.replaceChildren(h("p", {}, h("a", { href: "#/jobs" }, "← Jobs")),
    h("section", { class: "card", id: "job", "aria-labelledby": "job-title" }, h("div", { class: "title" }, title, cancel), head, status, reloadStatus), mountsPart);
  const reload = async () => {
    await Promise.all([loadJob(), loadMounts()]);
    if (reloadStatus.textContent) reloadStatus.say("");
  };
  // What could not be read: before anything is shown, in the head with a
  // retry; later, in the status line under it.
  function failed(err) {
    if (job) return reloadStatus.say(`The job could not be read again: ${errorText(err)}`, true);
    const missing = err?.code === "JOB_NOT_FOUND";
    title.textContent = missing ? "Job not found" : "Job";
    mountsPart.hidden = true;
    head.replaceChildren(h("p", { class: "error", role: "alert" }, missing ? "No such job in this account." : `The job could not be read: ${errorText(err)}`),
      h("button", { type: "button", id: "job-retry", onclick: start }, "Try again"));
  }
  let sub = null;
  function start() {
    sub?.stop();
    head.replaceChildren(h("p", { class: "muted" }, "Loading…"));
    sub = follow({ query: JOB_EVENTS, onEvent: (ev) => { if (ev.job?.id === id) reload().catch(failed); }, load: reload, onFail: failed });
  }
  start();
  const stopTimer = refreshEvery(() => { if (job?.state === "ACTIVE") reload().catch(failed); }, REFRESH_MS);
  return () => {
    stopTimer();
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
  // Disabled while a job is being created: a second click would create a second job.
  const submit = h("button", { class: "primary", type: "submit" }, "Create job…");
  const form = h("form", { id: "job-form", class: "card", "aria-labelledby": "job-form-title", hidden: true, onsubmit: async (e) => {
    e.preventDefault();
    if (submit.disabled) return;
    const values = {};
    for (const c of params.querySelectorAll("input, select")) values[c.name] = c.value.trim();
    const n = targets();
    const f = expr();
    if (!confirm(`Create a ${codeSel.value} job for ${n} mount${n === 1 ? "" : "s"}? They are the associated mounts the filter “${f}” selects now; each runs the command when a phone next passes it.`)) return;
    submit.disabled = true;
    try {
      const j = (await gql(`mutation($in: CreateJobInput!) { createJob(input: $in) { ${JOB_FIELDS} } }`, { in: {
        code: codeSel.value, params: values, filter: f, description: description.value.trim() || undefined,
        expiresAt: expires.value ? new Date(expires.value).toISOString() : undefined } })).createJob;
      status.replaceChildren(`Job created for ${j.targets} mount${j.targets === 1 ? "" : "s"}: `, h("a", { href: jobLink(j), id: "job-created" }, jobTitle(j)), ".");
      status.className = "form-status";
      status.setAttribute("role", "status");
    } catch (err) {
      status.say(errorText(err), true);
    } finally {
      submit.disabled = false;
    }
  } }, h("h2", { id: "job-form-title" }, "Create a job for these mounts"),
  h("p", { class: "muted" }, "The job's mounts are the associated ones the filter expression selects when it is created; the other filters of this page do not narrow it."),
  h("div", { class: "toolbar" }, field("Command", codeSel), params, field("Description", description), field("Expires", expires),
    submit), status);
  return form;
}
