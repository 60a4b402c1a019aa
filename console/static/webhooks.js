// Webhooks (owners): the account's endpoints and their deliveries.
import { gql } from "./api.js";
import { h, main, fmtDate, showError } from "./ui.js";

export function webhooksView() {
  const list = h("tbody");
  const deliveries = h("div");
  const created = h("div");
  async function load() {
    const d = await gql(`{ webhooks(pageSize: 20) { webhooks { id url eventTypes enabled description } } }`);
    list.replaceChildren(...d.webhooks.webhooks.map((w) => h("tr", {},
      h("td", {}, w.url), h("td", {}, w.eventTypes.join(", ") || "all"), h("td", {}, w.enabled ? "enabled" : "disabled"),
      h("td", {}, h("button", { onclick: () => showDeliveries(w) }, "Deliveries")),
      h("td", {}, h("button", { class: "danger", onclick: async () => {
        if (!confirm(`Delete the webhook to ${w.url}?`)) return;
        await gql(`mutation($id: ID!) { deleteWebhook(id: $id) }`, { id: w.id }).catch(showError);
        load();
      } }, "Delete")))));
  }
  async function showDeliveries(w) {
    const d = await gql(`query($id: ID!) { webhookDeliveries(id: $id, pageSize: 50) { deliveries { eventType attempt status responseStatus error attemptedAt nextAttemptAt } } }`, { id: w.id });
    deliveries.replaceChildren(h("h3", {}, "Deliveries to " + w.url), h("table", {},
      h("thead", {}, h("tr", {}, ["Event", "Attempt", "Status", "Answer", "Attempted", "Next"].map((t) => h("th", {}, t)))),
      h("tbody", {}, d.webhookDeliveries.deliveries.map((x) => h("tr", {}, h("td", {}, x.eventType), h("td", { class: "num" }, x.attempt), h("td", {}, x.status),
        h("td", {}, x.error || x.responseStatus || ""), h("td", {}, fmtDate(x.attemptedAt)),
        h("td", {}, fmtDate(x.nextAttemptAt)))))));
  }
  const form = h("form", { class: "toolbar", onsubmit: async (e) => {
    e.preventDefault();
    try {
      const d = await gql(`mutation($in: CreateWebhookInput!) { createWebhook(input: $in) { secret webhook { id } } }`, { in: { url: form.elements.url.value } });
      created.replaceChildren(h("p", {}, "The signing secret is shown only now:"), h("p", { class: "secret" }, d.createWebhook.secret));
      form.reset();
      load();
    } catch (err) {
      created.replaceChildren(h("p", { class: "error" }, err.message));
    }
  } }, h("input", { name: "url", type: "url", "aria-label": "Webhook URL", placeholder: "https://receiver.example/hook", required: true, size: 40 }), h("button", { class: "primary" }, "Add webhook"));
  main.replaceChildren(h("section", { class: "card" }, h("h1", {}, "Webhooks"), form, created,
    h("table", {}, h("thead", {}, h("tr", {}, ["URL", "Events", "", "", ""].map((t) => h("th", {}, t)))), list), deliveries));
  load().catch(showError);
  return () => {};
}
