// Webhooks (owners): the account's endpoints, edited, switched on and off,
// given a new secret and tested from here, with their deliveries; the list
// filtered by event type in the URL (#/webhooks?type=DELETED).
import { gql, APIError } from "./api.js";
import { h, main, fmtDate, showError, EVENT_TYPES } from "./ui.js";

// A webhook also carries the account-level events, which have no mount.
const WEBHOOK_TYPES = [...EVENT_TYPES, "JOB_COMPLETED", "ROLLOUT_PHASE_OPENED", "ROLLOUT_PAUSED", "ROLLOUT_COMPLETED"];

const FIELDS = "id url eventTypes mountUids description enabled";

export function webhooksView(query) {
  const list = h("tbody");
  const notice = h("div", { id: "webhook-notice", role: "status" });
  const editor = h("div", { id: "webhook-editor" });
  const deliveries = h("div", { id: "webhook-deliveries" });
  const typeSel = h("select", { id: "webhook-type" },
    h("option", { value: "" }, "Any event type"), WEBHOOK_TYPES.map((t) => h("option", { value: t }, t)));
  let hooks = null; // until loaded

  const receives = (w, t) => !t || w.eventTypes.length === 0 || w.eventTypes.includes(t);
  const say = (...children) => notice.replaceChildren(...children);
  const failed = (err) => {
    if (err instanceof APIError && err.code === "UNAUTHENTICATED") return;
    say(h("p", { class: "error", role: "alert" }, err.message || String(err)));
  };

  function render() {
    if (!hooks) return;
    const t = typeSel.value;
    const shown = hooks.filter((w) => receives(w, t));
    list.replaceChildren(...shown.map(row));
    if (!shown.length) {
      list.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, hooks.length ? `No webhook receives ${t}.` : "No webhook yet.")));
    }
  }

  function row(w) {
    const act = (action, label, onclick, cls) => h("button", { type: "button", "data-action": action, class: cls, onclick }, label);
    return h("tr", { "data-id": w.id },
      h("td", { class: "wrap" }, h("div", {}, w.url), w.description ? h("div", { class: "muted" }, w.description) : ""),
      h("td", { class: "wrap" }, w.eventTypes.join(", ") || "all"),
      h("td", { class: "wrap" }, w.mountUids.join(", ") || "all"),
      h("td", {}, h("span", { class: "pill " + (w.enabled ? "ASSOCIATED" : "INACTIVE") }, w.enabled ? "enabled" : "disabled")),
      h("td", {}, h("div", { class: "actions" },
        act("edit", "Edit", () => edit(w)),
        act("toggle", w.enabled ? "Disable" : "Enable", () => update(w, { enabled: !w.enabled })),
        act("test", "Send test", () => sendTest(w)),
        act("rotate", "Rotate secret", () => rotate(w)),
        act("deliveries", "Deliveries", () => showDeliveries(w).catch(failed)),
        act("delete", "Delete", () => remove(w), "danger"))));
  }

  async function load() {
    const d = await gql(`{ webhooks(pageSize: 20) { webhooks { ${FIELDS} } } }`);
    hooks = d.webhooks.webhooks;
    render();
  }

  async function update(w, input) {
    try {
      const d = await gql(`mutation($id: ID!, $in: UpdateWebhookInput!) { updateWebhook(id: $id, input: $in) { ${FIELDS} } }`, { id: w.id, in: input });
      hooks = hooks.map((x) => (x.id === w.id ? d.updateWebhook : x));
      render();
      say(h("p", {}, `Saved the webhook to ${d.updateWebhook.url}.`));
      return true;
    } catch (err) {
      failed(err);
      return false;
    }
  }

  // secretNotice shows a secret once, with a button that copies it.
  function secretNotice(text, secret) {
    const copied = h("span", { class: "muted", "aria-live": "polite" });
    const copy = h("button", { type: "button", id: "copy-secret", onclick: async () => {
      try {
        await navigator.clipboard.writeText(secret);
        copied.textContent = "Copied.";
      } catch {
        getSelection().selectAllChildren(code);
        copied.textContent = "Selected: copy it with the keyboard.";
      }
    } }, "Copy");
    const code = h("code", { class: "secret", id: "webhook-secret" }, secret);
    say(h("p", {}, text, " It is shown only now."), h("p", { class: "toolbar" }, code, copy, copied));
  }

  async function rotate(w) {
    if (!confirm(`Give the webhook to ${w.url} a new secret? The current one stops signing at once.`)) return;
    try {
      const d = await gql(`mutation($id: ID!) { rotateWebhookSecret(id: $id) }`, { id: w.id });
      secretNotice(`The new signing secret of the webhook to ${w.url}.`, d.rotateWebhookSecret);
    } catch (err) {
      failed(err);
    }
  }

  async function sendTest(w) {
    say(h("p", {}, `Sending a test to ${w.url}…`));
    try {
      const r = (await gql(`mutation($id: ID!) { testWebhook(id: $id) { status responseStatus error durationMs } }`, { id: w.id })).testWebhook;
      const ok = r.status === "SUCCEEDED";
      say(h("p", { id: "webhook-test-result", "data-status": r.status, class: ok ? "" : "error" },
        `Test to ${w.url}: ${ok ? "delivered" : "failed"}`,
        r.responseStatus ? `, HTTP ${r.responseStatus}` : "", r.error ? ` (${r.error})` : "", `, in ${r.durationMs} ms.`));
    } catch (err) {
      failed(err);
    }
  }

  async function remove(w) {
    if (!confirm(`Delete the webhook to ${w.url} and its deliveries?`)) return;
    try {
      await gql(`mutation($id: ID!) { deleteWebhook(id: $id) }`, { id: w.id });
      say(h("p", {}, `Deleted the webhook to ${w.url}.`));
      if (editor.dataset.id === w.id) editor.replaceChildren();
      await load();
    } catch (err) {
      failed(err);
    }
  }

  // closeEditor gives the focus back to the row's Edit button, as a
  // dialog would, so a keyboard user goes on from where they were.
  function closeEditor(w) {
    editor.replaceChildren();
    list.querySelector(`tr[data-id="${w.id}"] [data-action=edit]`)?.focus();
  }

  function edit(w) {
    editor.dataset.id = w.id;
    const types = WEBHOOK_TYPES.map((t) => h("label", { class: "check" },
      h("input", { type: "checkbox", name: "eventTypes", value: t, checked: w.eventTypes.includes(t) }), " ", t));
    const form = h("form", { class: "card edit", "aria-labelledby": "edit-title", onsubmit: async (e) => {
      e.preventDefault();
      const el = form.elements;
      const input = {
        url: el.url.value.trim(),
        eventTypes: [...form.querySelectorAll("input[name=eventTypes]:checked")].map((c) => c.value),
        mountUids: el.mountUids.value.split(/[\s,]+/).filter(Boolean),
        description: el.description.value,
      };
      if (await update(w, input)) closeEditor(w);
    } },
    h("h2", { id: "edit-title" }, "Edit the webhook"),
    h("p", {}, h("label", { for: "edit-url" }, "URL"), h("br"),
      h("input", { id: "edit-url", name: "url", type: "url", required: true, value: w.url, size: 50 })),
    h("fieldset", {}, h("legend", {}, "Event types (none ticked: every type)"), h("div", { class: "checks" }, types)),
    h("p", {}, h("label", { for: "edit-mounts" }, "Mount uids, separated by commas (empty: every mount)"), h("br"),
      h("input", { id: "edit-mounts", name: "mountUids", value: w.mountUids.join(", "), size: 50 })),
    h("p", {}, h("label", { for: "edit-description" }, "Description"), h("br"),
      h("input", { id: "edit-description", name: "description", value: w.description, size: 50, maxlength: 500 })),
    h("div", { class: "toolbar" }, h("button", { class: "primary" }, "Save"),
      h("button", { type: "button", onclick: () => closeEditor(w) }, "Cancel")));
    editor.replaceChildren(form);
    form.elements.url.focus();
  }

  async function showDeliveries(w) {
    const d = await gql(`query($id: ID!) { webhookDeliveries(id: $id, pageSize: 50) { deliveries { eventType attempt status responseStatus error attemptedAt nextAttemptAt } } }`, { id: w.id });
    const rows = d.webhookDeliveries.deliveries;
    deliveries.replaceChildren(h("h2", {}, "Deliveries to " + w.url), rows.length ? h("div", { class: "scroll" }, h("table", {},
      h("thead", {}, h("tr", {}, ["Event", "Attempt", "Status", "Answer", "Attempted", "Next"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows.map((x) => h("tr", {}, h("td", {}, x.eventType), h("td", { class: "num" }, x.attempt), h("td", {}, x.status),
        h("td", {}, x.error || x.responseStatus || ""), h("td", {}, fmtDate(x.attemptedAt)),
        h("td", {}, fmtDate(x.nextAttemptAt))))))) : h("p", { class: "muted" }, "No delivery yet."));
  }

  const form = h("form", { class: "toolbar", "aria-label": "Add a webhook", onsubmit: async (e) => {
    e.preventDefault();
    try {
      const d = await gql(`mutation($in: CreateWebhookInput!) { createWebhook(input: $in) { secret webhook { id url } } }`, { in: { url: form.elements.url.value } });
      secretNotice(`The signing secret of the webhook to ${d.createWebhook.webhook.url}.`, d.createWebhook.secret);
      form.reset();
      await load();
    } catch (err) {
      failed(err);
    }
  } }, h("input", { name: "url", type: "url", "aria-label": "Webhook URL", placeholder: "https://receiver.example/hook", required: true, size: 40 }),
  h("button", { class: "primary" }, "Add webhook"));

  const read = (q) => {
    typeSel.value = WEBHOOK_TYPES.includes(q.get("type")) ? q.get("type") : "";
    render();
  };
  // Setting the hash routes again, to read above: the filter is in the
  // history, so back and a shared link show the same list.
  typeSel.onchange = () => { location.hash = "#/webhooks" + (typeSel.value ? "?type=" + typeSel.value : ""); };

  main.replaceChildren(h("section", { class: "card", "aria-labelledby": "webhooks-title" }, h("h1", { id: "webhooks-title" }, "Webhooks"),
    h("p", { class: "muted" }, "The account's events are pushed to these URLs, signed as Standard Webhooks says."),
    form, h("div", { class: "toolbar", role: "search" }, h("label", { for: "webhook-type" }, "Show the webhooks that receive"), typeSel), notice,
    h("div", { class: "scroll" }, h("table", { id: "webhooks" }, h("thead", {}, h("tr", {},
      ["URL", "Events", "Mounts", "State"].map((t) => h("th", { scope: "col" }, t)), h("th", { scope: "col" }, h("span", { class: "sr-only" }, "Actions")))), list)),
    editor, deliveries));
  read(query);
  load().catch(showError);
  return { update: read, stop: () => {} };
}
