// Budgets (where the server has them) and the events that warn: alerts, refusals, failures.
import * as api from "../api.js";
import { card, h, number, table } from "../dom.js";
import { gauge } from "../charts.js";

const NEWEST = 100;

export default function alerts() {
  const live = h("div");
  const node = h("div", { id: "page-alerts" }, h("h1", {}, "Budgets & alerts"), live);
  return {
    node,
    stop() {},
    async refresh() {
      const [budgets, warnings, newest] = await Promise.all([
        api.listIfKnown("/budgets"),
        api.get("/dashboard/events", { type: "Warning", limit: NEWEST }).then((a) => a.items),
        api.get("/dashboard/events", { limit: NEWEST }).then((a) => a.items),
      ]);
      live.replaceChildren(
        card("Budgets", budgets === null
          ? h("p", { class: "muted" }, "This server has no budgets.")
          : table([
            ["budget", (b) => b.metadata.name],
            ["for", (b) => `${b.metadata.tenant}${b.spec.queue ? "/" + b.spec.queue : ""}`],
            ["amount", (b) => `${number(b.spec.amount)} ${b.spec.currency} ${b.spec.period}`, "num"],
            ["spent", (b) => number((b.status || {}).spent || 0), "num"],
            ["forecast", (b) => number((b.status || {}).forecast || 0), "num"],
            ["used", budgetGauge],
            ["crossed", (b) => ((b.status || {}).crossed || []).map((p) => `${p}%`).join(", ")],
            ["actions", (b) => ((b.status || {}).actions || []).join(", ")],
          ], budgets, { id: "budgets" })),
        card(`Newest warnings: alerts, refusals, failures`, eventTable(warnings, "warnings")),
        card("Newest events", eventTable(newest, "all-events")),
      );
    },
  };
}

function eventTable(events, id) {
  return table([
    ["time", (e) => new Date(e.timestamp).toLocaleString()],
    ["type", (e) => h("span", { class: e.type }, e.type)],
    ["object", (e) => `${e.kind} ${e.tenant ? e.tenant + "/" : ""}${e.name}`],
    ["reason", (e) => e.reason],
    ["message", (e) => e.message],
  ], events, { id });
}

function budgetGauge(budget) {
  const status = budget.status || {};
  const ticks = (budget.spec.thresholds || []).map((t) => (typeof t === "number" ? t : t.percent));
  return gauge(status.percent || 0, ticks, (status.forecast || 0) / budget.spec.amount * 100);
}
