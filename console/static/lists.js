// What the jobs and rollouts pages share: a bar per status of a job's or a
// rollout's targets, previous and next for a paged list, the timer that
// reads a page again while what it shows is under way, and the list page
// itself (its rows a page at a time, its empty state, its subscription).
import { gql, loadThenLive } from "./api.js";
import { h, setConnection, statusBox, errorText } from "./ui.js";

// progress: a bar per status, each its share of the targets, with the
// count in words beside it (the bars are only a picture of the words).
// statuses are the keys of item.counts.
export function progress(item, statuses) {
  return h("div", { class: "progress", "data-id": item.id }, statuses.map((s) => {
    const n = item.counts[s];
    // Through the style object: the console's CSP refuses style attributes.
    const fill = h("span", { class: "progress-fill " + s });
    fill.style.width = (item.targets ? (100 * n) / item.targets : 0) + "%";
    return h("div", { class: "progress-status", "data-status": s },
      h("span", { class: "progress-label" }, s),
      h("span", { class: "progress-bar", "aria-hidden": "true" }, fill),
      h("span", { class: "progress-count num" }, `${n} of ${item.targets}`));
  }));
}

// pager: previous and next for a paged list; go(d) moves d pages.
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

// refreshEvery calls fn every ms milliseconds and answers the stop. The
// hook window.__mountdRefreshMs, when set (a number) before a page opens,
// replaces ms for that page: 0 switches the timer off (tests that want
// every change to come from events), a small number speeds it up.
export function refreshEvery(fn, ms) {
  const hook = window.__mountdRefreshMs;
  const every = typeof hook === "number" ? hook : ms;
  if (!(every > 0)) return () => {};
  const timer = setInterval(fn, every);
  return () => clearInterval(timer);
}

// follow reads the event log's head, loads (load), then follows the
// account events of query from that head, so that nothing between the
// load and the subscription is lost. onFail gets an error of the first
// head or load. It answers {stop}.
export function follow({ query, onEvent, load, onFail }) {
  let sub = null;
  let stopped = false;
  const started = loadThenLive({ query, onEvent, onResync: load, onState: setConnection }).then((s) => {
    sub = s;
    if (stopped) s.stop();
  }, onFail);
  return { stop: () => { stopped = true; return started.then(() => sub?.stop()); } };
}

// listPage: the rows of a paged list, newest first. fetch(page, size)
// answers {items, pagination}; row(item) builds an item's row (its
// dataset.state is what active tests); a page shown with an active row is
// read again every refreshMs. events is follow's query and onEvent gets
// (item, ev, list). It answers {tbody, empty, pages, status, rows, load,
// stop, currentPage()}: status says when the page could not be read.
export function listPage({ name, label, pageSize, fetch, row, emptyText, active, refreshMs, events, onEvent }) {
  let currentPage = 1;
  let seq = 0;
  const tbody = h("tbody");
  const empty = h("p", { class: "empty", hidden: true }, emptyText);
  const status = statusBox(name + "-status");
  const rows = new Map();
  const list = { tbody, empty, status, rows, currentPage: () => currentPage };
  const failed = (err) => status.say(`The ${label} could not be read: ${errorText(err)}`, true);
  list.pages = pager(name + "-pager", "Pages of " + label, (d) => {
    currentPage += d;
    list.load().catch(failed);
  });
  // load reads the page shown; a reply to an older request is dropped.
  list.load = async () => {
    const n = ++seq;
    const d = await fetch(currentPage, pageSize);
    if (n !== seq) return;
    rows.clear();
    tbody.replaceChildren(...d.items.map((item) => {
      const tr = row(item);
      rows.set(item.id, tr);
      return tr;
    }));
    empty.hidden = d.items.length > 0;
    list.pages.show(d.pagination);
    if (status.textContent) status.say("");
  };
  // replace shows an item's row anew, if the page shows it.
  list.replace = (item) => {
    const tr = rows.get(item.id);
    if (!tr) return;
    const next = row(item);
    tr.replaceWith(next);
    rows.set(item.id, next);
  };
  list.failed = failed;
  const stopTimer = refreshEvery(() => {
    if ([...rows.values()].some(active)) list.load().catch(failed);
  }, refreshMs);
  const sub = follow({ query: events, onEvent: (ev) => onEvent(ev, list), load: list.load, onFail: failed });
  list.stop = () => {
    stopTimer();
    sub.stop();
  };
  return list;
}

// pagedQuery: fetch for listPage from a query answering {<field> {<items>
// {…} pagination {…}}} with $p and $n.
export function pagedQuery(query, field, items) {
  return async (p, n) => {
    const d = (await gql(query, { p, n }))[field];
    return { items: d[items], pagination: d.pagination };
  };
}
