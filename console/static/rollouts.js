// Rollouts (docs/api.md, "Rollouts"): one firmware revision for the mounts
// of a model, opened to them in phases; a phase opens when every target of
// the phases before it is decided, and too many failures pause the rollout
// by itself. The rollouts page lists them with their progress; a rollout's
// page shows its phases, its counts per state and its mounts, with Pause,
// Resume and Cancel for owners. Both are live: ROLLOUT_* events arrive over
// accountEvents, and the counts of a rollout under way are read again every
// so often (an install at a mount is not an account event). The firmware
// page starts rollouts (rolloutForm).
import { gql } from "./api.js";
import { h, main, isOwner, fmtDate, errorText, statusBox, field } from "./ui.js";
import { progress, pager, listPage, pagedQuery, follow, refreshEvery } from "./lists.js";

export const ROLLOUT_FIELDS = "id modelNumber softwareRevision filter phases failureThreshold minSample healthWindow requireIdle state pausedReason openPhase targets counts { pending eligible installing healthy failed } createdAt endedAt";
const TARGET_STATES = ["pending", "eligible", "installing", "healthy", "failed"];
const PAGE_SIZE = 20;
// How often the counts of a rollout under way are read again.
const REFRESH_MS = 10_000;
const ROLLOUT_EVENTS = ["ROLLOUT_PHASE_OPENED", "ROLLOUT_PAUSED", "ROLLOUT_COMPLETED"];
const PAUSED_REASONS = { FAILURE_THRESHOLD: "too many failures", MANUAL: "paused by a person" };

const rolloutLink = (r) => "#/rollouts/" + encodeURIComponent(r.id);
const rolloutTitle = (r) => `${r.modelNumber} → ${r.softwareRevision}`;
const underWay = (r) => r.state === "RUNNING" || r.state === "PAUSED";
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

// statePill: the state, and why a PAUSED rollout is paused.
function statePill(r) {
  const pill = h("span", { class: "pill rollout-state " + r.state }, r.state.toLowerCase());
  return r.pausedReason ? h("span", {}, pill, " ", h("span", { class: "muted paused-reason" }, PAUSED_REASONS[r.pausedReason] || r.pausedReason)) : pill;
}

// bar: one bar of the targets, decided ones first (healthy, failed), then
// those installing and eligible; pending is the rest. The words beside it
// say the same.
function bar(r) {
  const decided = r.counts.healthy + r.counts.failed;
  const track = h("span", { class: "rollout-bar", "aria-hidden": "true" }, ["healthy", "failed", "installing", "eligible"].map((s) => {
    // Through the style object: the console's CSP refuses style attributes.
    const seg = h("span", { class: "rollout-seg " + s });
    seg.style.width = (r.targets ? (100 * r.counts[s]) / r.targets : 0) + "%";
    return seg;
  }));
  const words = `${decided} of ${r.targets} decided` + (r.counts.failed ? `, ${r.counts.failed} failed` : "");
  return h("div", { class: "rollout-progress", "data-rollout": r.id }, track, h("span", { class: "rollout-words num" }, words));
}

// fmtDuration: a Go duration as people write it: 1h0m0s is 1h, 1h30m0s 1h30m.
export const fmtDuration = (d) => d.replace(/^(.*[hm])0s$/, "$1").replace(/^(.*h)0m$/, "$1");

// phaseSizes: how many targets each phase holds. Phase i holds the targets
// ranked below ceil(phases[i]% of them), less those of the phases before.
export function phaseSizes(r) {
  let before = 0;
  return r.phases.map((p) => {
    const upto = Math.ceil((p * r.targets) / 100);
    const n = upto - before;
    before = upto;
    return n;
  });
}

// phaseStatus: where phase i stands: done (its targets decided, the next
// opened), open, waiting (to open), or never opened (a cancelled rollout).
function phaseStatus(r, i) {
  if (r.state === "COMPLETED" || i < r.openPhase) return "done";
  if (i === r.openPhase) return r.state === "CANCELED" ? "stopped" : r.state === "PAUSED" ? "open, paused" : "open";
  return r.state === "CANCELED" ? "never opened" : "waiting";
}

// The account events the rollouts' pages follow.
const ROLLOUT_SUBSCRIPTION = `subscription($after: ID) { accountEvents(after: $after, types: [ROLLOUT_PHASE_OPENED, ROLLOUT_PAUSED, ROLLOUT_COMPLETED]) { id type occurredAt rollout { ${ROLLOUT_FIELDS} } } }`;
const rolloutOf = (ev) => (ev.rollout && ROLLOUT_EVENTS.includes(ev.type) ? ev.rollout : null);

// rolloutsView: the account's rollouts, newest first, a page at a time.
export function rolloutsView() {
  const row = (r) => h("tr", { "data-id": r.id, "data-state": r.state },
    h("td", {}, h("a", { href: rolloutLink(r) }, rolloutTitle(r))),
    h("td", {}, statePill(r)),
    h("td", {}, `${r.openPhase + 1} of ${r.phases.length}`),
    h("td", { class: "num" }, r.targets),
    h("td", {}, bar(r)), h("td", {}, fmtDate(r.createdAt)));
  // While a rollout shown is under way its counts move: the page is read
  // again. An event's rollout is as it was when the event happened, which
  // may be older than what the page loaded: the page is read again, for a
  // rollout it shows, or a new one (its first phase opened) on the first.
  const list = listPage({
    name: "rollouts", label: "rollouts", pageSize: PAGE_SIZE, row, refreshMs: REFRESH_MS,
    fetch: pagedQuery(`query($p: Int!, $n: Int!) { rollouts(currentPage: $p, pageSize: $n) { rollouts { ${ROLLOUT_FIELDS} } pagination { currentPage totalPages totalItems } } }`, "rollouts", "rollouts"),
    emptyText: "No rollouts yet. Start one from the firmware page, for a version of the catalogue.",
    active: (tr) => tr.dataset.state === "RUNNING" || tr.dataset.state === "PAUSED",
    events: ROLLOUT_SUBSCRIPTION,
    onEvent: (ev, l) => {
      const r = rolloutOf(ev);
      if (r && (l.rows.has(r.id) || l.currentPage() === 1)) l.load().catch(l.failed);
    },
  });
  main.replaceChildren(h("section", { class: "card", "aria-labelledby": "rollouts-title" },
    h("div", { class: "title" }, h("h1", { id: "rollouts-title" }, "Rollouts"),
      h("a", { class: "button", href: "#/firmware", id: "rollouts-firmware-link" }, "Start one from the firmware page")),
    h("p", { class: "muted" }, "Each rollout offers a firmware revision to the mounts of a model, phase by phase; a target is decided by the reports its mount signs after the install."),
    list.status,
    h("div", { class: "scroll" }, h("table", { id: "rollouts" }, h("caption", { class: "sr-only" }, "Rollouts"),
      h("thead", {}, h("tr", {}, ["Rollout", "State", "Phase", "Mounts", "Progress", "Created"].map((t) => h("th", { scope: "col" }, t)))), list.tbody)),
    list.empty, list.pages));
  return list.stop;
}

// rolloutView: one rollout, its phases, its counts, its mounts a page at a
// time, and Pause, Resume and Cancel for owners, each enabled in the state
// it applies to.
export function rolloutView(id) {
  let rollout = null;
  let currentPage = 1;
  // busy: a change of this page is in flight; what is read meanwhile is
  // not shown (the change's answer is). A reply to a request older than
  // the latest (or than a change) is dropped.
  let busy = false;
  let rolloutSeq = 0, mountsSeq = 0;
  // deprecated: the rollout's version was deprecated since it started;
  // the server refuses to resume it, so the page does not offer to.
  let deprecated = false;
  const head = h("div", { id: "rollout-head" }, h("p", { class: "muted" }, "Loading…"));
  const phases = h("ol", { id: "rollout-phases", class: "phases" });
  const counts = h("div", { id: "rollout-counts" });
  const status = statusBox("rollout-status");
  const reloadStatus = statusBox("rollout-reload-status");
  const tbody = h("tbody");
  const pages = pager("rollout-mounts-pager", "Pages of the rollout's mounts", (d) => { currentPage += d; loadMounts().catch(failed); });
  const title = h("h1", { id: "rollout-title" }, "Rollout");
  // Each action: its button, the state it applies in (said to those who
  // find it disabled), its mutation, what it says when done, and the
  // question it asks first.
  const actions = [
    ["pause", "Pause", (r) => r.state === "RUNNING", "Pause applies to a running rollout.", `mutation($id: ID!) { change: pauseRollout(id: $id) { ${ROLLOUT_FIELDS} } }`,
      "The rollout is paused: nothing is offered until it is resumed.", null],
    ["resume", "Resume", (r) => r.state === "PAUSED" && !deprecated, "Resume applies to a paused rollout whose version is not deprecated.", `mutation($id: ID!) { change: resumeRollout(id: $id) { ${ROLLOUT_FIELDS} } }`,
      "The rollout is resumed: the failure threshold counts afresh.", null],
    ["cancel", "Cancel rollout", underWay, "Cancel applies to a running or paused rollout.", `mutation($id: ID!) { change: cancelRollout(id: $id) { ${ROLLOUT_FIELDS} } }`, "The rollout is cancelled.",
      (r) => `Cancel the rollout of ${r.softwareRevision} to the ${r.modelNumber} mounts? No mount will be offered it any more; those that installed it keep it.`],
  ];
  const hints = [];
  const buttons = actions.map(([name, label, allowed, hint, mutation, done, ask]) => {
    hints.push(h("span", { id: `rollout-${name}-hint`, class: "sr-only" }, hint));
    const b = h("button", { type: "button", id: "rollout-" + name, class: name === "cancel" ? "danger" : undefined, disabled: true, "aria-describedby": `rollout-${name}-hint`, onclick: async () => {
      if (busy || !rollout || (ask && !confirm(ask(rollout)))) return;
      busy = true;
      rolloutSeq++;
      showButtons();
      let changed = null;
      try {
        changed = (await gql(mutation, { id })).change;
      } catch (err) {
        // The rollout may have changed meanwhile (a CONFLICT after it
        // paused itself): read it again, the old one only if that fails.
        busy = false;
        try {
          await loadRollout();
        } catch {
          showRollout(rollout);
        }
        status.say(errorText(err), true);
        return;
      }
      busy = false;
      showRollout(changed);
      status.say(done);
      try {
        await loadMounts();
      } catch (err) {
        status.say(`${done} Its mounts could not be read again: ${errorText(err)}`, true);
      }
    } }, label);
    b.allowed = allowed;
    return b;
  });
  const toolbar = h("div", { class: "toolbar", role: "group", "aria-label": "Rollout actions", hidden: !isOwner() }, buttons, hints);
  const showButtons = () => {
    for (const b of buttons) b.disabled = busy || !rollout || !b.allowed(rollout);
  };

  // The parts under the head: hidden while there is no rollout to show.
  const showParts = (on) => {
    for (const el of parts) el.hidden = !on;
  };
  function showRollout(r) {
    rollout = r;
    showParts(true);
    title.textContent = rolloutTitle(r);
    head.replaceChildren(h("dl", { class: "command-parts", id: "rollout-details", "data-state": r.state, "data-open-phase": r.openPhase },
      h("dt", {}, "State"), h("dd", {}, statePill(r)),
      h("dt", {}, "Model"), h("dd", {}, r.modelNumber),
      h("dt", {}, "Revision"), h("dd", {}, r.softwareRevision),
      h("dt", {}, "Filter"), h("dd", {}, r.filter ? h("code", {}, r.filter) : "every mount of the model"),
      h("dt", {}, "Mounts"), h("dd", {}, r.targets),
      h("dt", {}, "Pauses when"), h("dd", {}, `more than ${r.failureThreshold}% of at least ${plural(r.minSample, "decided mount")} failed`),
      h("dt", {}, "Health window"), h("dd", {}, fmtDuration(r.healthWindow)),
      h("dt", {}, "Install"), h("dd", {}, r.requireIdle ? "only while locked with the helmet present" : "whenever a phone passes"),
      h("dt", {}, "Created"), h("dd", {}, fmtDate(r.createdAt)),
      r.endedAt ? [h("dt", {}, "Ended"), h("dd", {}, fmtDate(r.endedAt))] : []),
      ...(deprecated && underWay(r) ? [h("p", { class: "error", id: "rollout-deprecated" },
        `Version ${r.softwareRevision} is deprecated: this rollout offers it to no mount and cannot be resumed. Cancel it, and start a rollout of another version.`)] : []));
    const sizes = phaseSizes(r);
    phases.replaceChildren(...r.phases.map((p, i) => {
      const st = phaseStatus(r, i);
      return h("li", { "data-phase": i, "data-status": st, class: "phase " + st.replace(/[^a-z]+/g, "-"), "aria-current": i === r.openPhase && underWay(r) ? "step" : undefined },
        h("span", { class: "phase-name" }, `Phase ${i + 1}`), h("span", { class: "muted" }, ` up to ${p}% · ${plural(sizes[i], "mount")} · `),
        h("span", { class: "phase-status" }, st));
    }));
    counts.replaceChildren(progress(r, TARGET_STATES));
    showButtons();
  }
  async function loadRollout() {
    const n = ++rolloutSeq;
    const r = (await gql(`query($id: ID!) { rollout(id: $id) { ${ROLLOUT_FIELDS} } }`, { id })).rollout;
    // Whether its version is deprecated matters while it is under way (a
    // model has a page of versions at most, here).
    const versions = underWay(r) ? (await gql(`query($m: String!) { firmwareVersions(modelNumber: $m, pageSize: 100) { versions { softwareRevision deprecated } } }`,
      { m: r.modelNumber })).firmwareVersions.versions : [];
    if (n !== rolloutSeq || busy) return;
    deprecated = versions.some((v) => v.softwareRevision === r.softwareRevision && v.deprecated);
    showRollout(r);
  }
  async function loadMounts() {
    const n = ++mountsSeq;
    const d = (await gql(`query($id: ID!, $p: Int!, $n: Int!) { rolloutMounts(id: $id, currentPage: $p, pageSize: $n) { mounts { uid state phase commandId installingSince reason } pagination { currentPage totalPages totalItems } } }`,
      { id, p: currentPage, n: PAGE_SIZE })).rolloutMounts;
    if (n !== mountsSeq) return;
    tbody.replaceChildren(...d.mounts.map((m) => h("tr", { "data-uid": m.uid, "data-state": m.state },
      h("td", {}, h("a", { href: "#/mounts/" + encodeURIComponent(m.uid) }, m.uid)),
      h("td", {}, m.phase + 1),
      h("td", {}, h("span", { class: "target-state " + m.state }, m.state.toLowerCase())),
      h("td", {}, m.installingSince ? fmtDate(m.installingSince) : "—"),
      h("td", {}, m.commandId ? h("code", {}, m.commandId) : "—"),
      h("td", { class: "wrap" }, m.reason || ""))));
    if (!d.mounts.length) tbody.append(h("tr", {}, h("td", { colspan: 6, class: "empty" }, "No mounts: none of the model was selected.")));
    pages.show(d.pagination);
  }
  const parts = [
    h("section", { class: "card", "aria-labelledby": "rollout-progress-title" }, h("h2", { id: "rollout-progress-title" }, "Progress"),
      h("p", { class: "muted" }, "A phase opens when every mount of the phases before it is decided: healthy once it signed a report on the new revision within the health window, failed on a refusal, a rollback or no such report."),
      h("div", { class: "rollout-columns" }, h("div", {}, h("h3", {}, "Phases"), phases), h("div", {}, h("h3", {}, "Mounts by state"), counts))),
    h("section", { class: "card", "aria-labelledby": "rollout-mounts-title" }, h("h2", { id: "rollout-mounts-title" }, "Mounts"),
      h("div", { class: "scroll" }, h("table", { id: "rollout-mounts" }, h("caption", { class: "sr-only" }, "The rollout's mounts, with their phase and state"),
        h("thead", {}, h("tr", {}, ["Mount", "Phase", "State", "Installing since", "Command", "Reason"].map((t) => h("th", { scope: "col" }, t)))), tbody)), pages)];
  main.replaceChildren(h("p", {}, h("a", { href: "#/rollouts" }, "← Rollouts")),
    h("section", { class: "card", id: "rollout", "aria-labelledby": "rollout-title" }, h("div", { class: "title" }, title, toolbar), head, status, reloadStatus), ...parts);
  const reload = async () => {
    await Promise.all([loadRollout(), loadMounts()]);
    if (reloadStatus.textContent) reloadStatus.say("");
  };
  // What could not be read: before the rollout is shown, in the head with
  // a retry; later, in the status line under it.
  function failed(err) {
    if (rollout) return reloadStatus.say(`The rollout could not be read again: ${errorText(err)}`, true);
    const missing = err?.code === "ROLLOUT_NOT_FOUND";
    title.textContent = missing ? "Rollout not found" : "Rollout";
    showParts(false);
    head.replaceChildren(h("p", { class: "error", role: "alert", id: "rollout-error" }, missing ? "No such rollout in this account." : `The rollout could not be read: ${errorText(err)}`),
      h("button", { type: "button", id: "rollout-retry", onclick: start }, "Try again"));
  }
  // An event's rollout is as it was when the event happened, which may be
  // older than what the page loaded: read it again instead.
  // What happened by itself is said too (a pause from this page says its own).
  const onEvent = (ev) => {
    const r = rolloutOf(ev);
    if (!r || r.id !== id) return;
    if (ev.type === "ROLLOUT_PAUSED" && r.pausedReason === "FAILURE_THRESHOLD") {
      status.say(`The rollout paused itself: more than ${r.failureThreshold}% of its decided mounts failed. Nothing is offered until it is resumed.`, true);
    } else if (ev.type === "ROLLOUT_PHASE_OPENED") status.say(`Phase ${r.openPhase + 1} opened: its mounts are offered the install.`);
    else if (ev.type === "ROLLOUT_COMPLETED") status.say("The rollout is complete: every mount is decided.");
    reload().catch(failed);
  };
  let sub = null;
  function start() {
    sub?.stop();
    head.replaceChildren(h("p", { class: "muted" }, "Loading…"));
    sub = follow({ query: ROLLOUT_SUBSCRIPTION, onEvent, load: reload, onFail: failed });
  }
  start();
  const stopTimer = refreshEvery(() => { if (rollout && underWay(rollout)) reload().catch(failed); }, REFRESH_MS);
  return () => {
    stopTimer();
    sub.stop();
  };
}

// rolloutForm: an owner's form to start a rollout of a catalogue version;
// open(version) shows it for that version's model and revision.
export function rolloutForm() {
  const model = h("input", { id: "rollout-model", name: "modelNumber", required: true, maxlength: 100, autocomplete: "off", spellcheck: "false" });
  const revision = h("input", { id: "rollout-revision", name: "softwareRevision", required: true, maxlength: 100, autocomplete: "off", spellcheck: "false" });
  const phasesIn = h("input", { id: "rollout-phases-input", name: "phases", value: "1, 10, 50, 100", required: true, pattern: "\\s*\\d+(\\s*,\\s*\\d+)*\\s*",
    "aria-describedby": "rollout-phases-help", autocomplete: "off", spellcheck: "false" });
  const threshold = h("input", { id: "rollout-threshold", name: "failureThreshold", type: "number", min: 0, max: 100, value: 5, required: true });
  const minSample = h("input", { id: "rollout-min-sample", name: "minSample", type: "number", min: 1, value: 10, required: true });
  const healthWindow = h("input", { id: "rollout-window", name: "healthWindow", value: "1h", required: true, "aria-describedby": "rollout-window-help", autocomplete: "off", spellcheck: "false" });
  const idle = h("input", { id: "rollout-idle", name: "requireIdle", type: "checkbox", checked: true });
  const filter = h("input", { id: "rollout-filter", name: "filter", maxlength: 2000, placeholder: 'presence = "ONLINE"', autocomplete: "off", spellcheck: "false" });
  const status = statusBox("rollout-form-status");
  const title = h("h2", { id: "rollout-form-title" }, "Start a rollout");
  const submit = h("button", { class: "primary", type: "submit" }, "Start rollout…");
  // What the fleet's mounts of the model run that is newer than the
  // revision: the rollout would take them back to an older one.
  const downgrade = h("p", { class: "warning", id: "rollout-downgrade", role: "note", hidden: true });
  let newer = null;
  let opened = null;
  const form = h("form", { id: "rollout-form", class: "card", "aria-labelledby": "rollout-form-title", hidden: true, onsubmit: async (e) => {
    e.preventDefault();
    if (submit.disabled) return;
    const m = model.value.trim(), rev = revision.value.trim(), f = filter.value.trim();
    const back = newer && m === opened.modelNumber && rev === opened.softwareRevision ? ` ${downgrade.textContent}` : "";
    if (!confirm(`Start rolling out ${rev} to the ${m} mounts${f ? ` that “${f}” selects` : ""}? Each phase is offered the install when a phone next passes its mounts.${back}`)) return;
    submit.disabled = true;
    try {
      const r = (await gql(`mutation($in: RolloutInput!) { createRollout(input: $in) { ${ROLLOUT_FIELDS} } }`, { in: {
        modelNumber: m, softwareRevision: rev, filter: f || undefined,
        phases: phasesIn.value.split(",").map((p) => p.trim()).filter((p) => p !== "").map(Number),
        failureThreshold: Number(threshold.value), minSample: Number(minSample.value), healthWindow: healthWindow.value.trim(), requireIdle: idle.checked } })).createRollout;
      status.replaceChildren(`Rollout started for ${plural(r.targets, "mount")}: `, h("a", { href: rolloutLink(r), id: "rollout-created" }, rolloutTitle(r)), ".");
      status.className = "form-status";
      status.setAttribute("role", "status");
    } catch (err) {
      status.say(errorText(err), true);
    } finally {
      submit.disabled = false;
    }
  } }, title,
  h("p", { class: "muted" }, "Its mounts are the associated ones of the model, with a device key, that the filter selects now and that run another revision, older or newer: a rollout may take mounts back to an older revision. They are ranked by a stable hash of their uid and split into the phases; a phase opens when every mount of the ones before it is decided."),
  downgrade,
  h("div", { class: "toolbar" }, field("Model", model), field("Revision", revision), field("Phases (cumulative %)", phasesIn),
    field("Failure threshold (%)", threshold), field("Minimum sample", minSample), field("Health window", healthWindow)),
  h("p", { class: "muted", id: "rollout-phases-help" }, "Phases: ascending percentages of the mounts, the last 100, e.g. 1, 10, 50, 100. The rollout pauses itself when more than the threshold of at least the minimum sample of decided mounts failed."),
  h("p", { class: "muted", id: "rollout-window-help" }, "Health window: how long after its install a mount has to sign a report on the new revision (a Go duration: 30m, 1h, 24h; at most 168h)."),
  h("div", { class: "toolbar" }, Object.assign(field("Filter (optional)", filter), { className: "field wide" }),
    h("label", { class: "check", for: "rollout-idle" }, idle, " Only while locked with the helmet present"),
    submit), status);
  // open(v, ahead): the form for version v, its fields as at first when
  // it was open for another; ahead (if known) is {count, highest}: how
  // many of the fleet's mounts of the model run a newer revision.
  form.open = (v, ahead = null) => {
    if (opened && (opened.modelNumber !== v.modelNumber || opened.softwareRevision !== v.softwareRevision)) form.reset();
    opened = v;
    model.value = v.modelNumber;
    revision.value = v.softwareRevision;
    title.textContent = `Start a rollout of ${v.softwareRevision} for ${v.modelNumber}`;
    newer = ahead?.count ? ahead : null;
    downgrade.hidden = !newer;
    downgrade.textContent = newer ? `${plural(newer.count, "mount")} of ${v.modelNumber} run a newer revision (up to ${newer.highest}): the rollout would take ${newer.count === 1 ? "it" : "them"} back to ${v.softwareRevision}.` : "";
    status.replaceChildren();
    status.className = "form-status";
    form.hidden = false;
    form.scrollIntoView({ block: "nearest" });
    phasesIn.focus();
  };
  return form;
}
