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

// exportMenu is a small menu of an export's formats: pick one to save.
export function exportMenu(id, label, path, onError) {
  const status = h("span", { class: "export-status", role: "status" });
  const pick = (format) => async (e) => {
    const menu = e.target.closest("details");
    menu.open = false;
    status.textContent = "preparing…";
    try {
      status.textContent = "saved " + (await exportFile(path(format)));
    } catch (err) {
      status.textContent = "";
      onError(err);
    }
  };
  return h("span", {}, h("details", { class: "menu", id },
    h("summary", {}, label),
    h("div", { class: "menu-body" },
      h("button", { type: "button", "data-format": "csv", onclick: pick("csv") }, "CSV"),
      h("button", { type: "button", "data-format": "ndjson", onclick: pick("ndjson") }, "NDJSON"))), status);
}
