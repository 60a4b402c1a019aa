// Exports: the fleet or a mount's history as a file, through the API's
// streamed exports (GET /api/v1/exports/…, owners). The console sends its
// token in a header, so a plain link cannot download: the answer is read
// into a Blob and saved from there. The browser holds the whole file while
// it saves it (about 12 MB for 100,000 mounts, 85 MB for a million history
// entries); larger exports belong to `mountctl export`, which streams to disk.
import { accessToken, signIn } from "./auth.js";
import { h } from "./ui.js";

// download saves data (text or a Blob) under name.
export function download(name, type, data) {
  const url = URL.createObjectURL(data instanceof Blob ? data : new Blob([data], { type }));
  const a = h("a", { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

// exportFile fetches an export (path under /api/v1, with its query) and
// saves it under the server's file name. It throws the problem's detail
// when the server refuses; a body cut short (the server aborts an export
// that fails midway) rejects too, so no partial file is saved.
export async function exportFile(path) {
  for (let attempt = 0; ; attempt++) {
    const token = await accessToken(attempt > 0);
    if (!token) {
      await signIn();
      throw new Error("signing in");
    }
    const res = await fetch("/api/v1" + path, { headers: { Authorization: "Bearer " + token } });
    if (res.status === 401 && attempt === 0) continue;
    if (!res.ok) {
      const p = await res.json().catch(() => null);
      throw new Error(p?.detail || `the server answered ${res.status}`);
    }
    const blob = await res.blob();
    const name = /filename="([^"]+)"/.exec(res.headers.get("Content-Disposition") || "")?.[1] || "export";
    download(name, blob.type, blob);
    return name;
  }
}

// formatButtons offers an export's formats; each saves the server's file
// and says so in status.
function formatButtons(path, status, onError) {
  const pick = (format) => async (e) => {
    const menu = e.target.closest("details");
    if (menu) menu.open = false;
    status.textContent = "preparing…";
    try {
      status.textContent = "saved " + (await exportFile(path(format)));
    } catch (err) {
      status.textContent = "";
      onError(err);
    }
  };
  return [h("button", { type: "button", "data-format": "csv", onclick: pick("csv") }, "CSV"),
    h("button", { type: "button", "data-format": "ndjson", onclick: pick("ndjson") }, "NDJSON")];
}

// exportMenu is a small menu of an export's formats: pick one to save.
export function exportMenu(id, label, path, onError) {
  const status = h("span", { class: "export-status", role: "status" });
  return h("span", {}, h("details", { class: "menu", id },
    h("summary", {}, label),
    h("div", { class: "menu-body" }, formatButtons(path, status, onError))), status);
}

// fleetExport is the fleet's one export control, saying which is which:
// the rows shown as the page shows them (search, boxes and columns
// applied; a CSV made here), or, for owners, the server's export of the
// whole filter (every field of every mount the filter expression selects;
// the search and boxes do not apply). rows() counts the rows shown, csv()
// makes their file, expr() is the expression the fleet was read with.
export function fleetExport({ rows, csv, expr, server, onError }) {
  const status = h("span", { class: "export-status", role: "status" });
  const rowsSay = h("span", { class: "muted", id: "export-rows-say" });
  const serverSay = h("span", { class: "muted", id: "export-server-say" });
  const fill = () => {
    const n = rows();
    rowsSay.textContent = `${n} mount${n === 1 ? "" : "s"}, the columns shown, made in the browser`;
    const e = expr();
    serverSay.textContent = e ? `Every mount “${e}” selects, every field; the search and boxes do not apply.` : "The whole fleet, every field; the search and boxes do not apply.";
  };
  const group = (id, title, say, ...controls) => h("div", { class: "export-group", role: "group", id, "aria-labelledby": id + "-title", "aria-describedby": say.id },
    h("b", { id: id + "-title" }, title), say, h("div", { class: "toolbar" }, ...controls));
  // Open, the menu stays within the window: at the end of a wide toolbar
  // it opens leftwards.
  const place = () => {
    body.style.left = "";
    const r = body.getBoundingClientRect();
    const over = r.right - (document.documentElement.clientWidth - 8);
    if (over > 0) body.style.left = `${-Math.min(over, r.left - 8)}px`;
  };
  const menu = h("details", { class: "menu", id: "export-menu", ontoggle: () => { if (menu.open) { fill(); place(); } } },
    h("summary", {}, "Export"));
  const body = h("div", { class: "menu-body" },
      group("export-rows", "Rows shown (CSV)", rowsSay, h("button", { type: "button", id: "csv", onclick: () => {
        menu.open = false;
        download("mounts.csv", "text/csv", csv());
        status.textContent = "saved mounts.csv (the rows shown)";
      } }, "CSV of the rows shown")),
      server ? group("export-fleet", "Whole filter (server export)", serverSay,
        ...formatButtons((format) => "/exports/mounts?format=" + format + (expr() ? "&filter=" + encodeURIComponent(expr()) : ""), status, onError)) : "");
  menu.append(body);
  fill();
  const control = h("span", { class: "export" }, menu, status);
  // The fleet calls refresh when what it shows changed: an open menu
  // follows (an expression applied while it was open, or just before).
  control.refresh = () => { if (menu.open) fill(); };
  return control;
}
